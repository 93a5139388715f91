"""kill -9 on PostgreSQL: the threads a killed worker held are claimable
again within seconds (its heartbeat stops), not after their lease (60 s here)."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

from dormant.records import NewInput
from dormant.store.postgres import PostgresStore
from tests.faults.conftest import REPO, worker_env

THREADS = 20
LEASE_S = 60.0
#: The child claims every ready thread, says how many, then holds them (slices in flight).
CHILD = f"""
import asyncio, sys
from dormant.store.postgres import PostgresStore

async def main(url):
    store = PostgresStore(url, pool_size=2)
    await store.open()
    print(len(await store.claim_threads("victim", 1000, {LEASE_S})), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def test_the_threads_of_a_killed_worker_run_again_within_seconds(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=2)
    await store.open()
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, pg_url, cwd=REPO, env=worker_env(), stdout=asyncio.subprocess.PIPE
    )
    try:
        items = [
            NewInput(thread_id=f"t{i}", kind="user", dedup_key="k", content="x", agent="a")
            for i in range(THREADS)
        ]
        await store.admit(items)
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), timeout=30)
        assert int(line) == THREADS, "the child holds every thread"
        await asyncio.sleep(1.5)  # it has been heartbeating for a while
        assert await store.claim_threads("rescuer", 1000, LEASE_S) == []
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        claimed = 0
        while claimed < THREADS and time.monotonic() - killed < 20:
            claimed += len(await store.claim_threads("rescuer", 1000, LEASE_S))
            await asyncio.sleep(0.2)  # the runtime's default poll
        took = time.monotonic() - killed
        assert claimed == THREADS, f"{claimed} of {THREADS} threads back after {took:.1f} s"
        assert took < 8, f"took {took:.1f} s (dead after 4 s of silence)"
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()
        await store.close()
