"""The RSS governor benchmark: a tool that allocates, a hard limit it must hold.

Every turn of every thread calls an inline tool that allocates ``hog_mb`` MiB in
``chunk_mb`` pieces (touching every page, a pause between pieces) and holds it a
while before answering: with ``concurrency`` slices at once the tools want far more
than the hard limit allows (``headroom_mb`` over the RSS measured after start-up).
A sender admits ``threads`` x ``turns`` inputs meanwhile, retrying each one refused
with :class:`~dormant.errors.Overloaded` after its ``retry_after``.

A watcher *process* (:mod:`dormant.bench.rsswatch`) samples this process's RSS every
10 ms. ``summary.json`` has ``hard_limit_bytes``, ``max_rss_bytes`` (the watcher's),
``inputs_sent`` (acknowledged), ``inputs_answered`` (consumed into a history: a slice
commits its inputs with its reply), ``refused_with_retry`` and ``lost``
(acknowledged, never answered), plus the governor's own counts; ``events.jsonl`` has
every governor transition as a JSON log line. It passes when
``max_rss_bytes <= hard_limit_bytes`` and ``lost == 0``.

The process runs with glibc's mmap threshold pinned (``MALLOC_MMAP_THRESHOLD_``,
set by the launcher) so that large freed buffers go back to the system at once;
without it glibc raises the threshold after the first free and later buffers stay
in the heap, where only ``malloc_trim`` (run in an emergency) returns them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..errors import Overloaded
from ..governor.levels import MIB
from ..governor.loop import rss_bytes
from ..logs import JsonFormatter
from ..models.scripted import ScriptedModel, tool_round_trip
from ..runtime import Runtime
from ..tools.spec import tool


@dataclass(frozen=True, slots=True, kw_only=True)
class GovernorBenchConfig:
    """The workload; the defaults take about half a minute."""

    out: str
    threads: int = 24
    turns: int = 3
    concurrency: int = 8
    hog_mb: int = 64
    chunk_mb: int = 2
    pause_s: float = 0.01
    hold_s: float = 0.2
    headroom_mb: int = 256
    send_every_s: float = 0.1
    sample_s: float = 0.01
    retry_after_s: float = 0.25
    timeout_s: float = 300.0


def hog_tool(chunk_mb: int, pause_s: float, hold_s: float) -> Any:
    """An inline tool holding ``mb`` MiB across awaits, allocated ``chunk_mb`` at a time."""

    @tool(timeout=120)
    async def hog(mb: int) -> str:
        """Allocate ``mb`` MiB, hold it, let it go."""
        held: list[bytes] = []
        for _ in range(max(1, mb // chunk_mb)):
            held.append(b"\x01" * (chunk_mb * MIB))  # written, so every page is resident
            await asyncio.sleep(pause_s)
        await asyncio.sleep(hold_s)
        return f"held {len(held) * chunk_mb} MiB"

    return hog


async def _answered(rt: Runtime, threads: int) -> int:
    answered = 0
    for n in range(threads):
        cursor: str | None = None
        while True:
            page = await rt.history(f"g{n}", cursor=cursor, limit=1000)
            answered += sum(1 for m in page.items if m.role == "user")
            cursor = page.next_cursor
            if not cursor:
                break
    return answered


async def run(config: GovernorBenchConfig) -> dict[str, Any]:
    """Run the workload; return the summary (also written to ``OUT/summary.json``)."""
    out = Path(config.out)
    out.mkdir(parents=True, exist_ok=True)
    hog = hog_tool(config.chunk_mb, config.pause_s, config.hold_s)
    model = ScriptedModel(tool_round_trip("hog", {"mb": config.hog_mb}, "done"))
    agent = Agent(name="hogger", model=model, system_prompt="You allocate.", tools=[hog])
    with tempfile.TemporaryDirectory(prefix="dormant-governor-") as tmp:
        base = rss_bytes()
        hard = base + config.headroom_mb * MIB
        settings = Settings.build(
            store=f"sqlite:///{tmp}/g.db",
            concurrency=config.concurrency,
            rss_limit=hard,
            rss_sample_s=config.sample_s,
            rss_retry_after_s=config.retry_after_s,
            lease_s=30.0,
            retry_base_s=0.05,
            poll_s=0.02,
        )
        watch_file = out / "rss_watch.json"
        watcher = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dormant.bench.rsswatch", str(os.getpid()), str(watch_file), "0.01"
        )
        started = time.perf_counter()
        sent = refused = 0
        try:
            async with Runtime(settings.store, [agent], settings=settings) as rt:
                runner = asyncio.create_task(rt.run())
                for i in range(config.threads * config.turns):
                    while True:
                        try:
                            admission = await rt.send(f"g{i % config.threads}", f"turn {i}", key=f"in-{i}")
                        except Overloaded as exc:
                            refused += 1
                            await asyncio.sleep(exc.retry_after)
                            continue
                        sent += 0 if admission.duplicate else 1
                        break
                    await asyncio.sleep(config.send_every_s)
                deadline = time.monotonic() + config.timeout_s
                while time.monotonic() < deadline:
                    status = await rt.status()
                    if not sum(status.backlog_by_priority.values()) and not status.threads_leased:
                        break
                    await asyncio.sleep(0.1)
                rt.stop()
                await runner
                answered = await _answered(rt, config.threads)
                governor = rt.governor
                assert governor is not None
                transitions = {k.name.lower(): v for k, v in governor.state.transitions.items()}
                shed = getattr(governor.handles.cancel_slices, "cancelled", 0)
                status = await rt.status()
        finally:
            watcher.terminate()
            await asyncio.wait_for(watcher.wait(), 10)
    watched = json.loads(watch_file.read_text())
    summary: dict[str, Any] = {
        "hard_limit_bytes": hard,
        "max_rss_bytes": watched["max_rss_bytes"],
        "inputs_sent": sent,
        "inputs_answered": answered,
        "refused_with_retry": refused,
        "lost": sent - answered,
        "pending_at_end": sum(status.backlog_by_priority.values()),
        "base_rss_bytes": base,
        "governor_max_rss_bytes": governor.max_rss,
        "governor_samples": governor.samples,
        "watcher_samples": watched["samples"],
        "watcher_max_gap_ms": round(watched["max_gap_s"] * 1000, 1),
        "level_entries": transitions,
        "slices_cancelled": shed,
        "elapsed_s": round(time.perf_counter() - started, 2),
        "config": asdict(config),
    }
    summary["passed"] = summary["max_rss_bytes"] <= hard and summary["lost"] == 0 and answered == sent
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def launch(config: GovernorBenchConfig) -> dict[str, Any]:
    """Run the benchmark in a fresh process (its own heap, the mmap threshold pinned)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=str(128 * 1024))
    subprocess.run(
        [sys.executable, "-m", "dormant.bench.governor", json.dumps(asdict(config))], env=env, check=True
    )
    result: dict[str, Any] = json.loads((Path(config.out) / "summary.json").read_text())
    return result


if __name__ == "__main__":
    _config = GovernorBenchConfig(**json.loads(sys.argv[1]))
    Path(_config.out).mkdir(parents=True, exist_ok=True)
    _handler = logging.FileHandler(Path(_config.out) / "events.jsonl", mode="w")
    _handler.setFormatter(JsonFormatter())
    logging.getLogger("dormant").addHandler(_handler)
    logging.getLogger("dormant").setLevel(logging.INFO)
    logging.getLogger("dormant").propagate = False
    asyncio.run(run(_config))
