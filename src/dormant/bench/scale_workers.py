"""The agent_scale workload with the runtime in N worker processes (``--workers N``).

The benchmark process only drives the workload: it admits exactly the inputs of
:mod:`dormant.bench.scale` (waves of agents, one user text per agent and turn) and
waits until the store is idle. N worker processes, each an ordinary runtime on the
same store (``python -m dormant.bench.scale_workers worker '<json>'``, the store URL
in the environment variable ``DORMANT_BENCH_WORKER_STORE``, never in argv), do the work.
After each wave every worker collects garbage, trims its heap and reports its RSS
(asked with SIGUSR1), so the figures are RSS *per worker process*.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import shutil
import signal
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import Settings
from ..runtime import Runtime
from ..store import open_store
from .scale import (
    DEFAULT_VIEW_CACHE_BYTES,
    make_agent,
    raw_bytes_per_agent,
    rss_bytes,
    slope_kib_per_agent,
    store_url,
    trim,
    turn_inputs,
)

#: the environment variable a worker process reads its store URL from (argv is public)
URL_ENV = "DORMANT_BENCH_WORKER_STORE"


async def worker(args: dict[str, Any]) -> None:
    """One worker: run the runtime until SIGTERM; answer SIGUSR1 with ``rss BYTES``."""
    url = os.environ[URL_ENV]  # never in argv, where ps shows a password
    settings = Settings.build(
        store=url,
        concurrency=args["concurrency"],
        tool_concurrency=args["concurrency"],
        poll_s=0.05,
        view_messages=args["view_messages"],
        view_bytes=args["view_bytes"],
        view_tokens=args["view_tokens"],
        view_cache_bytes=args["view_cache_bytes"],
        compaction_share=0,  # the workload is 2 completions a turn; compaction would add some
        worker_id=args["worker_id"],
    )
    async with Runtime(url, [make_agent()], settings=settings) as rt:
        loop = asyncio.get_running_loop()

        def report() -> None:
            trim()
            print(f"rss {rss_bytes()}", flush=True)

        loop.add_signal_handler(signal.SIGTERM, rt.stop)
        loop.add_signal_handler(signal.SIGUSR1, report)
        trim()
        print(f"ready {rss_bytes()}", flush=True)
        await rt.run()
        lat = rt.stats.slice_latency
        stats = {
            "completions": rt.stats.completions,
            "slices": rt.stats.slices,
            "commits": rt.store.commits,
            "p50_ms": round(lat.percentile(50) * 1000, 3),
            "p95_ms": round(lat.percentile(95) * 1000, 3),
            "p99_ms": round(lat.percentile(99) * 1000, 3),
        }
    print(f"stats {json.dumps(stats)}", flush=True)


class _Worker:
    """A worker process and the lines it printed, one queue per line kind."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: dict[str, asyncio.Queue[str]] = {k: asyncio.Queue() for k in ("ready", "rss", "stats")}
        self.reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        async for raw in self.proc.stdout:
            kind, _, value = raw.decode().strip().partition(" ")
            if kind in self.lines:
                self.lines[kind].put_nowait(value)

    async def next(self, kind: str, timeout: float = 120.0) -> str:
        async with asyncio.timeout(timeout):
            return await self.lines[kind].get()


async def run_workers_scale(
    kind: str,
    *,
    agents: int,
    turns: int,
    wave: int,
    out: Path,
    workers: int,
    concurrency: int = 256,
    progress: Callable[[int, int], None] | None = None,
    view_messages: int = 64,
    view_bytes: int = 256 * 1024,
    view_tokens: int = 0,
    view_cache_bytes: int = DEFAULT_VIEW_CACHE_BYTES,
) -> dict[str, Any]:
    """Run the workload with ``workers`` processes; write ``waves.csv`` and ``summary.json``."""
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    url = store_url(kind, workdir)
    store = open_store(url)
    await store.open()  # the schema exists before the workers start
    procs: list[_Worker] = []
    try:
        for n in range(workers):
            args = {
                "concurrency": concurrency,
                "worker_id": f"bench-worker-{n}",
                "view_messages": view_messages,
                "view_bytes": view_bytes,
                "view_tokens": view_tokens,
                "view_cache_bytes": view_cache_bytes,
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "dormant.bench.scale_workers",
                "worker",
                json.dumps(args),
                env={**os.environ, URL_ENV: url},
                stdout=asyncio.subprocess.PIPE,
                stdin=asyncio.subprocess.DEVNULL,
            )
            procs.append(_Worker(proc))
        rss_start = [int(await w.next("ready")) for w in procs]
        waves: list[dict[str, Any]] = []
        turn_times: dict[int, list[float]] = {}
        started = time.perf_counter()
        done_turns = 0
        for first in range(0, agents, wave):
            ids = [f"agent-{i}" for i in range(first, min(first + wave, agents))]
            for turn in range(turns):
                t0 = time.perf_counter()
                await store.admit(turn_inputs(ids, turn))
                while await store.has_work():  # noqa: ASYNC110 - the store is in other processes
                    await asyncio.sleep(0.02)
                turn_times.setdefault(turn, []).append(time.perf_counter() - t0)
                done_turns += len(ids)
                if progress:
                    progress(done_turns, agents * turns)
            for w in procs:
                w.proc.send_signal(signal.SIGUSR1)
            rss = [int(await w.next("rss")) for w in procs]
            waves.append(
                {
                    "agents": first + len(ids),
                    "rss_bytes": max(rss),
                    "elapsed_s": round(time.perf_counter() - started, 3),
                    "db_bytes": (await store.status()).db_bytes,
                    **{f"rss_worker_{n}": r for n, r in enumerate(rss)},
                }
            )
        elapsed = time.perf_counter() - started
        for w in procs:
            w.proc.send_signal(signal.SIGTERM)
        stats = [json.loads(await w.next("stats")) for w in procs]
        for w in procs:
            await w.proc.wait()
        status = await store.status()
    finally:
        for w in procs:
            if w.proc.returncode is None:
                w.proc.kill()
                await w.proc.wait()
        await store.close()
    completions = sum(s["completions"] for s in stats)
    slopes = [
        slope_kib_per_agent([(r["agents"], r[f"rss_worker_{n}"]) for r in waves]) for n in range(workers)
    ]
    summary: dict[str, Any] = {
        "store": f"{kind} x{workers} workers",
        "workers": workers,
        "agents": agents,
        "turns": turns,
        "wave": wave,
        "concurrency": concurrency,
        "completions": completions,
        "elapsed_s": round(elapsed, 3),
        "turns_per_s": round(agents * turns / elapsed, 1),
        "completions_per_s": round(completions / elapsed, 1),
        "rss_start_bytes": max(rss_start),
        "rss_end_bytes": waves[-1]["rss_bytes"] if waves else 0,
        "rss_start_bytes_per_worker": rss_start,
        "rss_end_bytes_per_worker": [waves[-1][f"rss_worker_{n}"] for n in range(workers)] if waves else [],
        "rss_slope_kib_per_agent": round(max(slopes), 4),
        "rss_slope_kib_per_agent_per_worker": [round(s, 4) for s in slopes],
        "db_bytes": status.db_bytes,
        "db_bytes_per_agent": round(status.db_bytes / agents, 1),
        "raw_bytes_per_agent": raw_bytes_per_agent(turns),
        "slice_p50_ms": max(s["p50_ms"] for s in stats),
        "slice_p95_ms": max(s["p95_ms"] for s in stats),
        "slice_p99_ms": max(s["p99_ms"] for s in stats),
        "turn_latency_first_ms": round(statistics.fmean(turn_times.get(0, [0.0])) * 1000, 2),
        "turn_latency_last_ms": round(statistics.fmean(turn_times.get(turns - 1, [0.0])) * 1000, 2),
        "store_commits": sum(s["commits"] for s in stats),
        "completions_per_worker": [s["completions"] for s in stats],
    }
    write_outputs(out, waves, summary, workers)
    shutil.rmtree(workdir, ignore_errors=True)
    return summary


def write_outputs(out: Path, waves: list[dict[str, Any]], summary: dict[str, Any], workers: int) -> None:
    """``waves.csv`` (RSS of the biggest worker, then of each) and ``summary.json`` in ``out``."""
    with open(out / "waves.csv", "w", newline="") as handle:
        per_worker = [f"rss_worker_{n}" for n in range(workers)]
        writer = csv.DictWriter(
            handle, fieldnames=["agents", "rss_bytes", "elapsed_s", "db_bytes", *per_worker]
        )
        writer.writeheader()
        writer.writerows(waves)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """``python -m dormant.bench.scale_workers '<json>'`` (driver, prints progress lines like
    :func:`dormant.bench.scale.main`) or ``... worker '<json>'`` (one worker)."""
    args = argv if argv is not None else sys.argv[1:]
    if args[0] == "worker":
        asyncio.run(worker(json.loads(args[1])))
        return
    params = json.loads(args[0])
    kind = params.pop("kind")
    out = Path(params.pop("out"))
    total = int(params["agents"]) * int(params["turns"])
    step = max(1, total // 200)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            print(f"progress {done} {total}", flush=True)

    asyncio.run(run_workers_scale(kind, out=out, progress=progress, **params))
    print(f"result {out / 'summary.json'}", flush=True)


if __name__ == "__main__":
    main()
