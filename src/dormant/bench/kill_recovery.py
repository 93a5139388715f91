"""kill -9 → every in-flight thread claimed again, with a live worker to take them over.

    python -m dormant.bench.kill_recovery sqlite|postgres [RUNS]

Each run: a worker process leases 20 ready threads (60 s leases) and holds them; after a
second it is SIGKILLed; a surviving worker claims every 50 ms (the runtime's poll is
finer) until it holds all 20. The time from the kill to the last is one sample. On
SQLite the dead worker's lock file proves it dead (``store/sqlite/owners.py``, looked at
every 0.25 s); on PostgreSQL its heartbeat stops (dead after 4 s). PostgreSQL: a DSN in
``DORMANT_BENCH_PG_DSN`` (see :mod:`dormant.bench.pg`).
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import sys
import tempfile
import time

from ..records import NewInput
from ..store import open_store

THREADS = 20
LEASE_S = 60.0
CHILD = f"""
import asyncio, os, sys
from dormant.store import open_store

async def main(url):
    store = open_store(url)
    await store.open()
    print(len(await store.claim_threads(f"victim-{{os.getpid()}}", 1000, {LEASE_S})), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def once(url: str, run: int) -> float:
    """One kill; seconds until the survivor holds every thread of the killed worker."""
    store = open_store(url)
    await store.open()
    try:
        await store.admit(
            [
                NewInput(thread_id=f"r{run}-{i}", kind="user", dedup_key="k", content="x", agent="a")
                for i in range(THREADS)
            ]
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CHILD, url, env=env, stdout=asyncio.subprocess.PIPE
        )
        assert child.stdout is not None
        held = int(await child.stdout.readline())
        if held != THREADS:
            raise SystemExit(f"the worker holds {held} threads, not {THREADS}")
        await asyncio.sleep(1.0)  # it has been alive (heartbeating) for a while
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        claimed = 0
        while claimed < THREADS:
            if time.monotonic() - killed > LEASE_S:
                raise SystemExit("the threads came back only with their leases' expiry")
            claimed += len(await store.claim_threads("survivor", 1000, LEASE_S))
            await asyncio.sleep(0.05)
        took = time.monotonic() - killed
        await child.wait()
        return took
    finally:
        await store.close()


async def main(kind: str, runs: int) -> None:
    """Run ``runs`` kills on a fresh ``kind`` store; print the figures."""
    if kind == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp(prefix='dormant-kill-')}/kill.db"
    elif kind == "postgres":
        from .pg import bench_postgres_url

        url = bench_postgres_url()
    else:
        raise SystemExit(f"unknown store {kind!r}: sqlite or postgres")
    samples = [await once(url, n) * 1000 for n in range(runs)]
    q = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 else samples * 100
    print(
        f"{kind}: kill -> all {THREADS} in-flight threads claimed again, {runs} kills: "
        f"p50 {q[49]:.0f} ms, p95 {q[94]:.0f} ms, max {max(samples):.0f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 10))
