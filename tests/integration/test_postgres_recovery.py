"""PostgreSQL recovery: the leases of a worker that stopped heartbeating
are taken at once, a live worker keeps its leases, and a host whose clock runs ahead
takes no live lease (leases follow the database clock)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from dormant.store.postgres import PostgresStore
from tests.contract.support import call, plan, take, user
from tests.helpers import eventually

LEASE = 60.0


@pytest.fixture
async def stores(pg_url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two processes' stores on one schema, beating every 0.1 s, dead after 0.5 s."""
    a, b = (PostgresStore(pg_url, pool_size=2, heartbeat_s=0.1, dead_after_s=0.5) for _ in range(2))
    await a.open()
    await b.open()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


async def test_the_leases_of_a_worker_that_stopped_heartbeating_are_taken_at_once(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = stores
    await a.admit([user("t1", "k1")])
    assert len(await a.claim_threads("wa", 1, LEASE)) == 1
    assert await b.claim_threads("wb", 1, LEASE) == [], "a live worker's lease is not taken"
    await a.backend.heartbeat.stop()  # as kill -9 would
    started = time.monotonic()

    async def taken() -> bool:
        return [c.thread_id for c in await b.claim_threads("wb", 1, LEASE)] == ["t1"]

    await eventually(taken, timeout=5)
    assert time.monotonic() - started < 5 < LEASE


async def test_a_running_call_of_a_dead_worker_is_reconciled_at_once(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = stores
    await a.admit([user("t1", "k1")])
    c, load = await take(a, "t1")
    await a.commit_slice(plan(c, load, calls=[call("c1", idempotent=True)]))
    assert len(await a.claim_outbox("wa", 1, LEASE)) == 1
    assert await b.claim_outbox("wb", 1, LEASE) == []
    await a.backend.heartbeat.stop()

    async def rerun() -> bool:
        return [e.call_id for e in await b.claim_outbox("wb", 1, LEASE)] == ["c1"]

    await eventually(rerun, timeout=5)


async def test_a_worker_that_keeps_beating_keeps_its_leases(
    stores: tuple[PostgresStore, PostgresStore],
) -> None:
    a, b = stores
    await a.admit([user("t1", "k1")])
    await a.claim_threads("wa", 1, LEASE)
    for _ in range(6):  # well past dead_after_s
        await asyncio.sleep(0.25)
        assert await b.claim_threads("wb", 1, LEASE) == []


async def test_a_host_whose_clock_runs_ahead_takes_no_live_lease(pg_url: str) -> None:
    a = PostgresStore(pg_url, pool_size=1)
    ahead = PostgresStore(pg_url, pool_size=1)
    assert ahead.backend.db_clock is not None
    ahead.backend.db_clock.local = lambda: time.time() + 2 * LEASE  # its host's clock is wrong
    await a.open()
    await ahead.open()
    try:
        await a.admit([user("t1", "k1")])
        (held,) = await a.claim_threads("wa", 1, LEASE)
        assert abs(ahead.clock() - a.clock()) < 1.0, "both read the database's clock"
        assert await ahead.claim_threads("wb", 1, LEASE) == []
        assert [c.thread_id for c in await a.renew_leases([held], LEASE)] == ["t1"]
    finally:
        await a.close()
        await ahead.close()
