"""The cost of one claim (the scheduler's hot path): ``python -m dormant.bench.claims``.

A store holds ``--threads`` ready threads spread over ``--tenants`` tenants (1: the
library's default tenant, no prefix); each round claims ``--limit`` of them and gives
them back (a release, not timed), ``--rounds`` times. Printed per store: the claim's
wall-time mean, p50 and p99 and its CPU time (the process's, writer thread included:
steadier than wall time on a shared machine), in microseconds. Bounded: the threads are admitted once, in
batches, and the rounds are counted.

The module uses the public store API only (``claim_threads`` without the newer
keyword unless ``--cap`` is set), so the same file measures an older checkout too:
``PYTHONPATH=<old>/src python src/dormant/bench/claims.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ..records import NewInput, Priority
from ..store import open_store


def thread_ids(threads: int, tenants: int) -> list[str]:
    """``threads`` ids spread round-robin over ``tenants`` tenants (1: unprefixed)."""
    if tenants <= 1:
        return [f"thread-{n:07d}" for n in range(threads)]
    prefixes = ["t" + secrets.token_hex(6) + "/" for _ in range(tenants)]
    return [f"{prefixes[n % tenants]}thread-{n:07d}" for n in range(threads)]


async def measure(
    url: str, *, threads: int, tenants: int, limit: int, rounds: int, cap: int
) -> tuple[list[float], list[float]]:
    """Wall and CPU times (seconds; CPU: of the whole process, the writer thread
    included) of ``rounds`` claims of ``limit`` on a fresh store at ``url``."""
    store = open_store(url)
    await store.open()
    try:
        ids = thread_ids(threads, tenants)
        for start in range(0, len(ids), 500):
            await store.admit(
                [
                    NewInput(
                        thread_id=tid,
                        kind="user",
                        dedup_key="k",
                        content="x",
                        priority=Priority(n % 3),
                        agent="a",
                    )
                    for n, tid in enumerate(ids[start : start + 500])
                ]
            )
        times: list[float] = []
        cpu: list[float] = []
        extra: dict[str, Any] = {"tenant_slices": cap} if cap else {}
        for _ in range(rounds):
            began, began_cpu = time.perf_counter(), time.process_time()
            claims = await store.claim_threads("bench", limit, 30.0, **extra)
            times.append(time.perf_counter() - began)
            cpu.append(time.process_time() - began_cpu)
            if not claims:
                raise SystemExit("nothing claimed: the store has no ready thread")
            await asyncio.gather(*(store.release(c) for c in claims))
        return times, cpu
    finally:
        await store.close()


def report(name: str, times: list[float], cpu: list[float]) -> str:
    """One line of figures (microseconds): wall time mean, p50, p99, and CPU per claim."""
    ordered = sorted(times)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"{name:<10} claims={len(times)} mean={statistics.fmean(times) * 1e6:6.0f} us "
        f"p50={statistics.median(times) * 1e6:6.0f} us p99={p99 * 1e6:6.0f} us "
        f"cpu/claim={statistics.fmean(cpu) * 1e6:6.0f} us"
    )


def main() -> None:
    """Parse the options, run each store, print a line per store."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="memory,sqlite", help="memory, sqlite and/or postgres")
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--tenants", type=int, default=1)
    parser.add_argument("--limit", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--cap", type=int, default=0, help="tenant_slices (0: none)")
    args = parser.parse_args()
    if not 1 <= args.threads <= 1_000_000 or not 1 <= args.rounds <= 100_000:
        raise SystemExit("--threads 1..1,000,000 and --rounds 1..100,000")
    with tempfile.TemporaryDirectory(prefix="dormant-bench-claims-") as tmp:
        for name in args.stores.split(","):
            if name == "memory":
                url = "memory://"
            elif name == "sqlite":
                url = f"sqlite:///{Path(tmp) / 'claims.db'}"
            elif name == "postgres":
                from .pg import bench_postgres_url

                url = bench_postgres_url()
            else:
                raise SystemExit(f"unknown store {name!r}")
            times, cpu = asyncio.run(
                measure(
                    url,
                    threads=args.threads,
                    tenants=args.tenants,
                    limit=args.limit,
                    rounds=args.rounds,
                    cap=args.cap,
                )
            )
            print(report(name, times, cpu), flush=True)


if __name__ == "__main__":
    main()
