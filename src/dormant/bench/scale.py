"""The agent_scale workload: RSS against the number of agents, turns per second.

It reproduces the workload published by the Rust "Infinity" runtime: ``agents``
agents (``agent-{i}``) launched in waves of ``wave``; for each wave and each turn
every agent of the wave gets one user text; each turn is two completions and one
**async** tool round trip (outbox → dispatcher → inbox). After each wave the
process runs ``gc.collect()`` and ``malloc_trim(0)`` and samples VmRSS.

Each store runs in its own process (``python -m dormant.bench.scale``) so one
store's memory never pollutes another's figures.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import csv
import ctypes
import gc
import json
import shutil
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .. import tokens
from ..agent import Agent
from ..config import Settings
from ..models.scripted import ScriptedModel, tool_round_trip
from ..records import NewInput
from ..runtime import Runtime
from ..tools.spec import tool
from . import rsswatch
from .stats import flatness_turns, per_turn_p50, turn_ratio

#: The runtime's default view cache budget (what a user gets without flags).
DEFAULT_VIEW_CACHE_BYTES: int = Settings.model_fields["view_cache_bytes"].default

ASSISTANT_TEXT = (
    "Reviewed the module and updated the failing case; the assertion now covers the boundary path. "
)
ASSISTANT_REPEAT = 12
TOOL_ARGS: dict[str, object] = {"command": "cargo test --workspace"}
TOOL_RESULT = "test result: ok. 148 passed; 0 failed; 3 ignored; finished in 21.38s" * 5
CALL_ID_BYTES = len("call_") + 32


def user_text(turn: int, thread_id: str) -> str:
    """The user text of ``turn`` for ``thread_id``, exactly as the workload defines it."""
    return (
        f"Turn {turn}: re-run the affected tests for {thread_id} and summarize any failures "
        "along with the modules they belong to."
    )


def turn_inputs(thread_ids: list[str], turn: int) -> list[NewInput]:
    """The user inputs of one turn of a wave (dedup key ``turn-N``; threads created on first use)."""
    return [
        NewInput(
            thread_id=tid,
            kind="user",
            dedup_key=f"turn-{turn}",
            content=user_text(turn, tid),
            agent="coder",
        )
        for tid in thread_ids
    ]


@tool(mode="async")
async def run_command(command: str) -> str:
    """Run a shell command (the benchmark returns a fixed test summary)."""
    return TOOL_RESULT


def make_agent() -> Agent:
    """The benchmark's agent: scripted model + the async ``run_command`` tool."""
    model = ScriptedModel(
        tool_round_trip("run_command", TOOL_ARGS, ASSISTANT_TEXT, repeat=ASSISTANT_REPEAT),
        name="scripted-agent-scale",
        chunk=len(ASSISTANT_TEXT),  # the text streams as 12 pieces, as the workload says
    )
    return Agent(name="coder", model=model, system_prompt="You fix failing tests.", tools=[run_command])


def raw_bytes_per_agent(turns: int, thread_id: str = "agent-0") -> int:
    """Bytes of conversation text one agent produces: user, assistant, tool call, tool result."""
    args = json.dumps(TOOL_ARGS)
    per_turn = 2 * len(ASSISTANT_TEXT * ASSISTANT_REPEAT) + len(TOOL_RESULT)
    per_turn += len("run_command") + len(args) + CALL_ID_BYTES
    return sum(len(user_text(t, thread_id).encode()) + per_turn for t in range(turns))


def rss_bytes(field: str = "VmRSS") -> int:
    """VmRSS (or another ``Vm*`` figure, e.g. VmHWM) of this process, from /proc/self/status."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return 0


def trim() -> None:
    """Collect garbage and give freed heap back to the OS (glibc malloc_trim)."""
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def slope_kib_per_agent(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of RSS (bytes) over agents, in KiB per agent, skipping wave 1."""
    pts = points[1:] if len(points) > 2 else points
    if len(pts) < 2:
        return 0.0
    xs = [float(a) for a, _ in pts]
    ys = [float(r) for _, r in pts]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    if den == 0:
        return 0.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den / 1024


@dataclass
class WaveRow:
    """One CSV row: RSS after a wave."""

    agents: int
    rss_bytes: int
    elapsed_s: float
    db_bytes: int


@dataclass
class ScaleResult:
    """Figures of one run (the JSON summary)."""

    store: str
    agents: int
    turns: int
    wave: int
    concurrency: int
    completions: int
    elapsed_s: float
    turns_per_s: float
    completions_per_s: float
    rss_start_bytes: int
    rss_end_bytes: int
    rss_slope_kib_per_agent: float
    db_bytes: int
    db_bytes_per_agent: float
    raw_bytes_per_agent: int
    slice_p50_ms: float
    slice_p95_ms: float
    slice_p99_ms: float
    turn_latency_first_ms: float
    turn_latency_last_ms: float
    store_commits: int
    #: whether the agent's limits count tokens (ViewLimits.counts_tokens), and its token budget
    counts_tokens: bool = False
    view_tokens: int = 0
    #: whether any view needed an exact count, so the tokenizer (~43 MB) was loaded
    tokenizer_loaded: bool = False
    #: the view cache's RAM budget of the run
    view_cache_bytes: int = 0
    turn_latency_ms: list[float] = field(default_factory=list)
    #: per turn index, the median over waves of the time the wave's turn round took
    turn_latency_p50_ms: list[float] = field(default_factory=list)
    #: per turn index, the median over waves of the median slice latency of the wave's round
    turn_slice_p50_ms: list[float] = field(default_factory=list)
    #: the turns the flatness figures compare (the middle one and the last, 1-based)
    flatness_turns: list[int] = field(default_factory=list)
    #: turn_slice_p50_ms of the last turn over that of the middle one (1.0: flat)
    flatness: float | None = None
    #: the same ratio of turn_latency_p50_ms (whole rounds: noisier, 1 sample a wave)
    flatness_rounds: float | None = None
    #: per turn index, the median over waves of this process's CPU time per agent-turn
    turn_cpu_ms: list[float] = field(default_factory=list)
    #: the same ratio of turn_cpu_ms (what load from other processes does not move)
    flatness_cpu: float | None = None
    #: the most RSS the process ever had (VmHWM: the kernel's high-water mark)
    rss_peak_bytes: int = 0
    #: the most RSS a watcher process saw, sampling this one every 10 ms from before the
    #: runtime opens until after it closes (the peak figure that the targets are set for)
    rss_peak_sampled_bytes: int = 0
    #: the watcher's samples and the longest gap between two (how fine the sampling was)
    rss_watch_samples: int = 0
    rss_watch_max_gap_ms: float = 0.0
    waves: list[WaveRow] = field(default_factory=list)


def store_url(kind: str, workdir: Path) -> str:
    """The store URL for ``kind`` (sqlite | memory | postgres)."""
    if kind == "sqlite":
        return f"sqlite:///{workdir / 'scale.db'}"
    if kind == "memory":
        return "memory://"
    if kind == "postgres":
        from .pg import bench_postgres_url

        return bench_postgres_url()
    raise SystemExit(f"unknown store {kind!r}: sqlite, memory or postgres")


def disk_bytes(workdir: Path) -> int:
    """Bytes of the SQLite file and its WAL in ``workdir``."""
    return sum(p.stat().st_size for p in workdir.glob("scale.db*") if p.is_file())


def db_bytes(kind: str, url: str, workdir: Path) -> int:
    """Bytes the store of a run takes: the SQLite file + WAL, PostgreSQL's tables (with
    indexes and TOAST) in the run's schema, 0 for the in-RAM baseline."""
    if kind == "postgres":
        from .pg import schema_bytes

        return schema_bytes(url)
    return disk_bytes(workdir)


async def run_scale(
    kind: str,
    *,
    agents: int,
    turns: int,
    wave: int,
    out: Path,
    concurrency: int = 256,
    progress: Callable[[int, int], None] | None = None,
    keep_data: bool = False,
    view_messages: int = 64,
    view_bytes: int = 256 * 1024,
    view_tokens: int = 0,
    view_cache_bytes: int = DEFAULT_VIEW_CACHE_BYTES,
    before_close: Callable[[Runtime], Awaitable[None]] | None = None,
) -> ScaleResult:
    """Run the workload on one store; write ``out/waves.csv`` and ``out/summary.json``.
    ``before_close`` runs on the open runtime after the last wave (the figures are
    taken first), e.g. to read the threads back."""
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    url = store_url(kind, workdir)
    settings = Settings.build(
        store=url,
        concurrency=concurrency,
        tool_concurrency=concurrency,
        poll_s=0.05,
        view_messages=view_messages,
        view_bytes=view_bytes,
        view_tokens=view_tokens,
        view_cache_bytes=view_cache_bytes,
        compaction_share=0,  # the workload is 2 completions a turn; compaction would add some
    )
    watch_file = out / "rss_watch.json"
    watcher = rsswatch.start(watch_file)
    trim()
    rss_start = rss_bytes()
    rows: list[WaveRow] = []
    turn_times: dict[int, list[float]] = {}
    # the slices of one turn round (2 x the wave: bounded), reduced to their median per round
    round_slices = array.array("d")
    slice_p50s: dict[int, list[float]] = {}
    # CPU seconds of this process per agent-turn of each round: what other processes on
    # the machine do not change (wall-clock latency on shared cores does)
    turn_cpu: dict[int, list[float]] = {}
    started = time.perf_counter()
    done_turns = 0
    try:
        async with Runtime(url, [make_agent()], settings=settings) as rt:
            rt.stats.slice_latency.sinks.append(round_slices.append)
            for first in range(0, agents, wave):
                ids = [f"agent-{i}" for i in range(first, min(first + wave, agents))]
                for turn in range(turns):
                    t0, c0 = time.perf_counter(), time.process_time()
                    await rt.admit(turn_inputs(ids, turn))
                    await rt.run_until_idle()
                    turn_times.setdefault(turn, []).append(time.perf_counter() - t0)
                    turn_cpu.setdefault(turn, []).append((time.process_time() - c0) / len(ids))
                    slice_p50s.setdefault(turn, []).append(statistics.median(round_slices or [0.0]))
                    del round_slices[:]
                    done_turns += len(ids)
                    if progress:
                        progress(done_turns, agents * turns)
                trim()
                rows.append(
                    WaveRow(
                        agents=first + len(ids),
                        rss_bytes=rss_bytes(),
                        elapsed_s=round(time.perf_counter() - started, 3),
                        db_bytes=db_bytes(kind, url, workdir),
                    )
                )
            elapsed = time.perf_counter() - started
            stats = rt.stats
            commits = rt.store.commits
            limits = next(iter(rt.limits.values()))
            if before_close is not None:
                await before_close(rt)
    finally:
        watched = rsswatch.stop(watcher, watch_file)
    db = db_bytes(kind, url, workdir)  # a PostgreSQL run's schema is dropped only at exit
    lat = stats.slice_latency
    p50s = per_turn_p50([turn_times[t] for t in sorted(turn_times)])
    slice_p50 = per_turn_p50([slice_p50s[t] for t in sorted(slice_p50s)])
    compared = list(flatness_turns(turns)) if turns >= 2 else []
    flat = turn_ratio(slice_p50, compared[1], compared[0]) if compared else None
    flat_rounds = turn_ratio(p50s, compared[1], compared[0]) if compared else None
    cpu_p50 = per_turn_p50([turn_cpu[t] for t in sorted(turn_cpu)])
    flat_cpu = turn_ratio(cpu_p50, compared[1], compared[0]) if compared else None
    result = ScaleResult(
        store=kind,
        agents=agents,
        turns=turns,
        wave=wave,
        concurrency=concurrency,
        completions=stats.completions,
        elapsed_s=round(elapsed, 3),
        turns_per_s=round(agents * turns / elapsed, 1),
        completions_per_s=round(stats.completions / elapsed, 1),
        rss_start_bytes=rss_start,
        rss_end_bytes=rows[-1].rss_bytes if rows else rss_bytes(),
        rss_slope_kib_per_agent=round(slope_kib_per_agent([(r.agents, r.rss_bytes) for r in rows]), 4),
        db_bytes=db,
        db_bytes_per_agent=round(db / agents, 1),
        raw_bytes_per_agent=raw_bytes_per_agent(turns),
        slice_p50_ms=round(lat.percentile(50) * 1000, 3),
        slice_p95_ms=round(lat.percentile(95) * 1000, 3),
        slice_p99_ms=round(lat.percentile(99) * 1000, 3),
        turn_latency_first_ms=round(statistics.fmean(turn_times.get(0, [0.0])) * 1000, 2),
        turn_latency_last_ms=round(statistics.fmean(turn_times.get(turns - 1, [0.0])) * 1000, 2),
        store_commits=commits,
        counts_tokens=limits.counts_tokens,
        view_tokens=limits.max_tokens,
        tokenizer_loaded=tokens.encoding.cache_info().currsize > 0,
        view_cache_bytes=settings.view_cache_bytes,
        turn_latency_ms=[round(statistics.fmean(turn_times[t]) * 1000, 2) for t in sorted(turn_times)],
        turn_latency_p50_ms=[round(v * 1000, 2) for v in p50s],
        flatness_turns=compared,
        turn_slice_p50_ms=[round(v * 1000, 3) for v in slice_p50],
        flatness=None if flat is None else round(flat, 3),
        flatness_rounds=None if flat_rounds is None else round(flat_rounds, 3),
        turn_cpu_ms=[round(v * 1000, 4) for v in cpu_p50],
        flatness_cpu=None if flat_cpu is None else round(flat_cpu, 3),
        rss_peak_bytes=rss_bytes("VmHWM"),
        rss_peak_sampled_bytes=int(watched["max_rss_bytes"]),
        rss_watch_samples=int(watched["samples"]),
        rss_watch_max_gap_ms=round(watched["max_gap_s"] * 1000, 1),
        waves=rows,
    )
    write_outputs(result, out)
    if not keep_data:
        shutil.rmtree(workdir, ignore_errors=True)
    return result


def write_outputs(result: ScaleResult, out: Path) -> None:
    """``waves.csv`` (one row per wave) and ``summary.json`` in ``out``."""
    with open(out / "waves.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["agents", "rss_bytes", "elapsed_s", "db_bytes"])
        for row in result.waves:
            writer.writerow([row.agents, row.rss_bytes, row.elapsed_s, row.db_bytes])
    summary = asdict(result)
    summary.pop("waves")
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: ``python -m dormant.bench.scale '<json of run_scale arguments>'``.

    Prints ``progress DONE TOTAL`` lines while it runs and ``result PATH`` at the end.
    """
    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    kind = args.pop("kind")
    out = Path(args.pop("out"))
    total = int(args["agents"]) * int(args["turns"])
    step = max(1, total // 200)

    def progress(done: int, total: int) -> None:
        if done % step == 0 or done == total:
            print(f"progress {done} {total}", flush=True)

    asyncio.run(run_scale(kind, out=out, progress=progress, **args))
    print(f"result {out / 'summary.json'}", flush=True)


def load_waves(path: Path) -> list[WaveRow]:
    """The rows of a ``waves.csv``."""
    with open(path, newline="") as handle:
        return [
            WaveRow(
                agents=int(r["agents"]),
                rss_bytes=int(r["rss_bytes"]),
                elapsed_s=float(r["elapsed_s"]),
                db_bytes=int(r["db_bytes"]),
            )
            for r in csv.DictReader(handle)
        ]


def load_summary(path: Path) -> dict[str, Any]:
    """A summary JSON written by :func:`write_outputs`."""
    data: dict[str, Any] = json.loads(path.read_text())
    return data


if __name__ == "__main__":
    main()
