"""Two workers configured with the same worker id against one PostgreSQL: the second is
refused with a clear error instead of silently sharing the first one's leases; a worker
restarted under the id of one that just died waits for its heartbeat to go stale."""

from __future__ import annotations

import asyncio
import time

import psycopg
import pytest

from dormant.errors import WorkerIdInUse
from dormant.records import NewInput
from dormant.store.postgres import PostgresStore

BEAT = (
    "INSERT INTO workers (id, host, pid, started_at, heartbeat_at)"
    " VALUES (%s, 'elsewhere', 4242, now(), now())"
)
REBEAT = "UPDATE workers SET heartbeat_at = now() WHERE id = %s"


async def _other_worker(url: str, worker: str, beats: int, ready: asyncio.Event) -> None:
    """A process on another host that beats for ``worker`` ``beats`` times, 0.2 s apart."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(BEAT, (worker,))
        ready.set()
        for _ in range(beats):
            await asyncio.sleep(0.2)
            await conn.execute(REBEAT, (worker,))


async def test_a_second_live_worker_with_the_same_id_is_refused(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2, heartbeat_s=0.2, dead_after_s=1.0)
    await store.open()
    try:
        await store.admit([NewInput(thread_id="t", kind="user", dedup_key="k", content="x", agent="a")])
        ready = asyncio.Event()
        other = asyncio.create_task(_other_worker(pg_url, "w1", 50, ready))
        await ready.wait()
        started = time.monotonic()
        with pytest.raises(WorkerIdInUse, match=r"worker id 'w1' is in use by process 4242 on elsewhere"):
            await store.claim_threads("w1", 10, 30.0)
        assert time.monotonic() - started < 5, "refused once the other's heartbeat outlived dead_after"
        other.cancel()
        # nothing was claimed under the shared id; another id works at once
        assert [c.thread_id for c in await store.claim_threads("w2", 10, 30.0)] == ["t"]
    finally:
        await store.close()


async def test_a_restart_under_the_id_of_a_dead_worker_takes_it_over(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2, heartbeat_s=0.2, dead_after_s=1.0)
    await store.open()
    try:
        await store.admit([NewInput(thread_id="t", kind="user", dedup_key="k", content="x", agent="a")])
        await _other_worker(pg_url, "w1", 1, asyncio.Event())  # it beat, then died
        claims = await store.claim_threads("w1", 10, 30.0)  # waits until its row is stale
        assert [c.thread_id for c in claims] == ["t"]
    finally:
        await store.close()
