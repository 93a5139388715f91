"""One cell of the benchmark matrix, in a process of its own (so its RSS is its own).

A cell is ``sessions`` threads on a fresh SQLite file, default configuration, the
agent_scale agent (scripted model, one async tool round trip a turn). First their
history is written by the real runtime:

* ``uniform``: every thread takes :data:`UNIFORM_TURNS` turns;
* ``longtail``: Zipf-like, most threads one or two turns (``numpy.random.zipf(2)``,
  at most :data:`TAIL_MAX_TURNS`), and one thread in :data:`LONG_EVERY` (at least one)
  carries :data:`LONG_MESSAGES` messages (admitted as many user texts at once, so
  slices take them in batches: the history exists without 2,500 turns of waiting).

Then ``rounds`` rounds: ``active`` percent of the threads (a fixed random sample)
take one turn each while the rest stay idle with their history on disk. The figures
are of those rounds: slice latency percentiles, view cache hits and bytes, history
read from the store per slice, queue depth and bytes at each round's start, RSS and
the Python heap (``sys.getallocatedblocks``, cheap) after each round.

Message mixes: ``text`` (the agent_scale texts), ``blobs`` (the tool returns
:data:`BLOB_BYTES` of log text, stored as a blob), ``memory`` (the agent has a
subject; each thread is bound to one of its own by a first ``hello`` turn sent with an
identity, before its history turns; the default MiniLM embedder is loaded first and
its RSS reported apart), ``images`` (each thread's first turn carries a photo of its
own, a :data:`IMAGE_SIDE` px PNG stored once as a blob; every view of the thread then
holds its reference, and the scripted model's dialect is shown the placeholder).

``python -m dormant.bench.matrix_cell '<json>'`` prints ``progress N TOTAL`` lines and
``result PATH``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..memory.embedder import MiniLMEmbedder
from ..models.scripted import ScriptedModel, tool_round_trip
from ..parts import Image
from ..records import NewInput
from ..runtime import Runtime
from ..subject import SubjectOptions
from ..tools.spec import tool
from ..view.cache import ViewCache
from .scale import (
    ASSISTANT_REPEAT,
    ASSISTANT_TEXT,
    DEFAULT_VIEW_CACHE_BYTES,
    TOOL_ARGS,
    TOOL_RESULT,
    rss_bytes,
    trim,
    turn_inputs,
)
from .stats import slope_per_unit

HISTORIES = ("uniform", "longtail")
MIXES = ("text", "blobs", "images", "memory")
#: mixes a cell can run (all of them)
RUNNABLE_MIXES = MIXES
#: side of the images mix's photos (noise, so they neither compress nor repeat)
IMAGE_SIDE = 256
UNIFORM_TURNS = 20
TAIL_MAX_TURNS = 40
LONG_EVERY = 1_000
LONG_MESSAGES = 10_000
BLOB_BYTES = 50 * 1024
SEED_WAVE = 1_000
LOG_LINE = "2026-12-02T10:00:00Z worker-{n:06d} INFO shard ok, 148 passed, 0 failed in 21.38s\n"
BLOB_TEXT = "".join(LOG_LINE.format(n=n) for n in range(BLOB_BYTES // len(LOG_LINE.format(n=0)) + 1))[
    :BLOB_BYTES
]


@tool(mode="async")
async def run_command(command: str) -> str:
    """Run a shell command (the benchmark returns a fixed test summary)."""
    return TOOL_RESULT


_RUNS = itertools.count()


@tool(mode="async", name="run_command")
async def run_command_blob(command: str) -> str:
    """Run a shell command (the benchmark returns 50 KB of log lines, each output its own:
    blobs are stored by content, so identical outputs would be stored once)."""
    head = f"run {next(_RUNS)}\n"
    return head + BLOB_TEXT[len(head) :]


def make_agent(mix: str) -> Agent:
    """The cell's agent: agent_scale's scripted model and tool; the tool's output and the
    subject depend on the message mix."""
    if mix not in RUNNABLE_MIXES:
        raise ValueError(f"mix {mix!r} cannot run: one of {', '.join(RUNNABLE_MIXES)}")
    model = ScriptedModel(
        tool_round_trip("run_command", TOOL_ARGS, ASSISTANT_TEXT, repeat=ASSISTANT_REPEAT),
        name="scripted-agent-scale",
        chunk=len(ASSISTANT_TEXT),
    )
    return Agent(
        name="coder",
        model=model,
        system_prompt="You fix failing tests.",
        tools=[run_command_blob if mix == "blobs" else run_command],
        subject=SubjectOptions() if mix == "memory" else None,
    )


def photo(i: int) -> bytes:
    """Thread ``i``'s photo: an :data:`IMAGE_SIDE` px PNG of seeded noise (~200 KB)."""
    import io

    import numpy as np
    from PIL import Image as PilImage

    pixels = np.random.default_rng(i).integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 3), dtype=np.uint8)
    out = io.BytesIO()
    PilImage.fromarray(pixels, "RGB").save(out, format="PNG")
    return out.getvalue()


async def _send_photos(rt: Runtime, thread_ids: list[str], turn: int) -> None:
    """Turn ``turn`` of ``thread_ids`` as :func:`turn_inputs` words it, each with its photo."""
    for item in turn_inputs(thread_ids, turn):
        index = int(item.thread_id.rsplit("-", 1)[1])
        await rt.send(
            item.thread_id,
            item.content,
            dedup_key=item.dedup_key,
            agent=item.agent,
            parts=[Image(photo(index), name=f"photo-{index}.png", alt="a parcel")],
        )


def history_turns(sessions: int, history: str, seed: int = 0) -> list[int]:
    """Turns each thread takes while its history is written."""
    if history == "uniform":
        return [UNIFORM_TURNS] * sessions
    if history != "longtail":
        raise ValueError(f"history {history!r}: uniform or longtail")
    import numpy as np

    draws = np.random.default_rng(seed).zipf(2.0, sessions)
    return [int(min(d, TAIL_MAX_TURNS)) for d in draws]


def long_threads(sessions: int, history: str) -> list[int]:
    """Indexes of the threads that carry :data:`LONG_MESSAGES` messages (long tail only)."""
    if history != "longtail":
        return []
    return list(range(0, sessions, LONG_EVERY))[: max(1, sessions // LONG_EVERY)]


def _tid(i: int) -> str:
    return f"agent-{i}"


def _db_sizes(workdir: Path) -> tuple[int, int]:
    db = workdir / "scale.db"
    wal = workdir / "scale.db-wal"
    return (db.stat().st_size if db.exists() else 0, wal.stat().st_size if wal.exists() else 0)


async def _seed(
    rt: Runtime, sessions: int, history: str, mix: str, tick: Callable[[int], None]
) -> list[tuple[int, int]]:
    """Write every thread's history; RSS after each wave of :data:`SEED_WAVE` threads."""
    turns = history_turns(sessions, history)
    points: list[tuple[int, int]] = []
    for first in range(0, sessions, SEED_WAVE):
        wave = list(range(first, min(first + SEED_WAVE, sessions)))
        if mix == "memory":  # each thread bound to a subject of its own at its first turn
            for i in wave:
                await rt.send(_tid(i), "hello", dedup_key="bind", identity={"phone": f"+1555{i:07d}"})
            await rt.run_until_idle()
        for turn in range(max(turns[i] for i in wave)):
            ids = [_tid(i) for i in wave if turns[i] > turn]
            if mix == "images" and turn == 0:
                await _send_photos(rt, ids, turn)
            else:
                await rt.admit(turn_inputs(ids, turn))
            await rt.run_until_idle()
            tick(len(ids))
        trim()
        points.append((wave[-1] + 1, rss_bytes()))
    for i in long_threads(sessions, history):
        # about four messages per batch of inputs plus one per input: LONG_MESSAGES in all
        texts = [
            NewInput(
                thread_id=_tid(i),
                kind="user",
                dedup_key=f"long-{n}",
                content=f"note {n}: shard ok",
                agent="coder",
            )
            for n in range(LONG_MESSAGES)
        ]
        for start in range(0, len(texts), 2_000):
            await rt.admit(texts[start : start + 2_000])
            await rt.run_until_idle()
    return points


async def run_cell(
    *,
    sessions: int,
    active_pct: float,
    history: str,
    mix: str,
    rounds: int,
    out: Path,
    progress: Callable[[int, int], None] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Run one cell; write ``out/cell.json`` and return its figures."""
    if sessions < 1 or rounds < 1 or not 0 < active_pct <= 100:
        raise ValueError("sessions and rounds are positive, active_pct within (0, 100]")
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    url = f"sqlite:///{workdir / 'scale.db'}"
    settings = Settings.build(store=url, poll_s=0.05, compaction_share=0)
    trim()
    rss_start = rss_bytes()
    embedder_bytes = 0
    embedder = None
    if mix == "memory":
        embedder = MiniLMEmbedder()
        embedder.embed(["warm the model up"])
        trim()
        embedder_bytes = max(0, rss_bytes() - rss_start)
    active = max(1, math.ceil(sessions * active_pct / 100))
    seed_total = sum(history_turns(sessions, history))
    total = seed_total + rounds * active
    done = 0

    def tick(n: int) -> None:
        nonlocal done
        done += n
        if progress:
            progress(done, total)

    started = time.perf_counter()
    async with Runtime(url, [make_agent(mix)], settings=settings, memory_embedder=embedder) as rt:
        seed_points = await _seed(rt, sessions, history, mix, tick)
        seed_s = time.perf_counter() - started
        trim()
        rss_seeded = rss_bytes()
        cache = rt.store.views
        assert isinstance(cache, ViewCache)
        c0 = cache.stats()
        reads0, bytes0 = rt.store.view_reads.reads, rt.store.view_reads.bytes
        slices0 = rt.stats.slices
        rt.stats.slice_latency.reset()
        chosen = sorted(random.Random(seed).sample(range(sessions), active))
        ids = [_tid(i) for i in chosen]
        rounds_out: list[dict[str, Any]] = []
        measured = time.perf_counter()
        for r in range(rounds):
            inputs = turn_inputs(ids, UNIFORM_TURNS + TAIL_MAX_TURNS + r)
            await rt.admit(inputs)
            status = await rt.store.status()
            depth = sum(status.backlog_by_priority.values())
            t0 = time.perf_counter()
            await rt.run_until_idle()
            took = time.perf_counter() - t0
            tick(active)
            trim()
            rounds_out.append(
                {
                    "round": r,
                    "seconds": round(took, 4),
                    "queue_depth": depth,
                    "queue_bytes": sum(len(i.content.encode()) for i in inputs),
                    "rss_bytes": rss_bytes(),
                    "heap_blocks": sys.getallocatedblocks(),
                }
            )
        measure_s = time.perf_counter() - measured
        c1 = cache.stats()
        slices = rt.stats.slices - slices0
        lat = rt.stats.slice_latency
        hits, misses = c1.hits - c0.hits, c1.misses - c0.misses
        figures: dict[str, Any] = {
            "sessions": sessions,
            "active_pct": active_pct,
            "history": history,
            "mix": mix,
            "rounds": rounds,
            "status": "ok",
            "threads_active": active,
            "threads_idle": sessions - active,
            "slices": slices,
            "seed_turns": seed_total,
            "seed_s": round(seed_s, 2),
            "measure_s": round(measure_s, 3),
            "turns_per_s": round(rounds * active / measure_s, 1) if measure_s else 0.0,
            "rss_start_bytes": rss_start,
            "rss_seeded_bytes": rss_seeded,
            "rss_end_bytes": rounds_out[-1]["rss_bytes"],
            "rss_peak_bytes": rss_bytes("VmHWM"),
            "embedder_rss_bytes": embedder_bytes,
            "rss_slope_seed_kib_per_session": round(
                slope_per_unit([(float(a), float(b)) for a, b in seed_points[1:] or seed_points]), 4
            ),
            "heap_blocks_end": rounds_out[-1]["heap_blocks"],
            "queue_depth_max": max(r["queue_depth"] for r in rounds_out),
            "queue_bytes_max": max(r["queue_bytes"] for r in rounds_out),
            "view_cache_bytes": c1.bytes,
            "view_cache_budget": c1.max_bytes or DEFAULT_VIEW_CACHE_BYTES,
            "view_cache_hit_ratio": round(hits / (hits + misses), 4) if hits + misses else 0.0,
            # misses the spill file served (counted in the misses): no history read
            "view_spill_hits": c1.spill_hits - c0.spill_hits,
            "history_reads_per_slice": round((rt.store.view_reads.reads - reads0) / slices, 3)
            if slices
            else 0,
            "history_bytes_per_slice": round((rt.store.view_reads.bytes - bytes0) / slices, 1)
            if slices
            else 0,
            "slice_p50_ms": round(lat.percentile(50) * 1000, 3),
            "slice_p95_ms": round(lat.percentile(95) * 1000, 3),
            "slice_p99_ms": round(lat.percentile(99) * 1000, 3),
            "concurrency": rt.settings.concurrency,
            "rounds_detail": rounds_out,
        }
    db, wal = _db_sizes(workdir)
    figures["db_bytes"], figures["wal_bytes"] = db, wal
    (out / "cell.json").write_text(json.dumps(figures, indent=2) + "\n")
    shutil.rmtree(workdir, ignore_errors=True)
    return figures


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: ``python -m dormant.bench.matrix_cell '<json of run_cell arguments>'``."""
    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    out = Path(args.pop("out"))
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.2 or done == total:
            last[0] = now
            print(f"progress {done} {total}", flush=True)

    asyncio.run(run_cell(out=out, progress=progress, **args))
    print(f"result {out / 'cell.json'}", flush=True)


if __name__ == "__main__":
    main()
