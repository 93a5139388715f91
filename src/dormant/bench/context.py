"""The bounded-context benchmark: cost per slice flat in history length.

Two threads on one store, run by the real runtime with a scripted model:

* ``long``: grown turn by turn to ``messages`` messages (a user text and a reply per
  turn); then its slices alternate with those of a thread at about 100 messages, and
  per-slice latency and history read from the store are compared side by side (both
  views are full: budget-bound). RSS is taken at message ~100 and at the end.
* ``blob``: an async tool returns ``blob_mb`` MB of log text, streamed; it is stored
  as a blob and the model sees a head/tail excerpt, pages into the middle with
  ``read_blob``, and the conversation goes on. The same runs first with a small
  (1 MB) output as the reference.

The view cache is off, so every slice builds its view from the store: the
worst case for bytes read. Compaction is off so the view builder alone bounds
the prompt. Run with ``dormant bench context``; writes ``summary.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import ToolCall
from ..runtime import Runtime
from ..tools.spec import tool
from .scale import rss_bytes, store_url, trim

WINDOW = 12_000  # tokens; the history budget is what is left after output, system and tools
MAX_OUTPUT = 1_024
# ~75 and ~160 tokens: a hundred messages are more than the history budget holds, so
# the view is full (budget-bound) from message 100 on and the two windows compare
# slices of the same view size
USER_TEXT = "Step {n}: look at the failing job in shard {shard} and tell me which module broke it. " * 4
REPLY_TEXT = (
    "Shard {shard} fails in the payments module: the retry path double-counts the refund when "
    "the gateway times out. I patched the counter and re-ran the job; it passes now. "
) * 4
LOG_LINE = "2026-11-29T10:00:00Z worker-{n:07d} INFO processed batch {n} in 12.7 ms (ok)\n"
REF = re.compile(r"sha256:[0-9a-f]{64}")
SAMPLE = 40  # slices per measured window
TURN_TIMEOUT_S = 120.0  # a turn takes milliseconds; minutes mean the runtime stopped


def median_of(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per figure, the median over ``rows``."""
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def reset_hwm() -> None:
    """Make VmHWM start again from the current RSS (Linux: ``5`` to ``clear_refs``)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def hwm_bytes() -> int:
    """VmHWM (peak RSS since the last :func:`reset_hwm`) of this process."""
    return rss_bytes("VmHWM")


def script(request: ModelRequest) -> ModelReply:
    """Reply to user text; call the big tool when asked, then page its blob once."""
    last = request.messages[-1]
    n = len(request.messages)
    if last.role == "user" and last.content.startswith("run the job"):
        size = last.content.split()[-1]
        call = ToolCall(id=f"job{n}", name="dump_log", arguments=json.dumps({"mb": float(size)}))
        return ModelReply(text="Running it.", tool_calls=(call,))
    if last.role == "tool" and last.name == "dump_log":
        match = REF.search(last.content)
        if match is None:
            return ModelReply(text="the output was small enough to read whole")
        args = json.dumps({"ref": match.group(0), "offset": 500_000, "length": 8192})
        return ModelReply(
            text="Reading the middle.", tool_calls=(ToolCall(id=f"r{n}", name="read_blob", arguments=args),)
        )
    if last.role == "tool":
        return ModelReply(text=f"The log at that offset reads: {last.content[:200]}")
    return ModelReply(text=REPLY_TEXT.format(shard=n % 97))


@tool(mode="async")
async def dump_log(mb: float) -> AsyncIterator[bytes]:
    """A job whose output is ``mb`` MB of log lines, produced as a stream."""

    async def lines() -> AsyncIterator[bytes]:
        target = int(mb * 1_000_000)
        written = 0
        n = 0
        while written < target:
            piece = "".join(LOG_LINE.format(n=n + i) for i in range(4096)).encode()[: target - written]
            n += 4096
            written += len(piece)
            yield piece

    return lines()


def make_runtime(url: str) -> Runtime:
    model = ScriptedModel(script, context_window=WINDOW, max_output_tokens=MAX_OUTPUT)
    agent = Agent(name="bench", model=model, tools=[dump_log], system_prompt="You fix failing CI jobs.")
    settings = Settings.build(
        store=url,
        concurrency=4,
        poll_s=0.005,
        view_messages=10_000,  # the token budget binds, not the message count
        view_bytes=4 * 1024 * 1024,
        view_cache_bytes=0,  # every slice reads its view from the store
        compaction_share=0,
    )
    return Runtime(url, [agent], settings=settings)


class Meter:
    """Figures of the slices since the last window: latency, history read from the store."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self._mark()

    def _counters(self) -> tuple[int, int, int]:
        store = self.rt.store
        reads = store.view_reads
        return reads.bytes + store.blob_read_bytes, reads.tokens, reads.reads

    def _mark(self) -> None:
        self._start = self._counters()
        self._slices = self.rt.stats.slices
        self.rt.stats.slice_latency.reset()

    def window(self) -> dict[str, float]:
        """The figures since the last call, per slice; starts a new window."""
        slices = max(1, self.rt.stats.slices - self._slices)
        read, tokens, reads = (now - then for now, then in zip(self._counters(), self._start, strict=True))
        latency = self.rt.stats.slice_latency
        result = {
            "slices": slices,
            "slice_ms_p50": latency.percentile(50) * 1000,
            "slice_ms_mean": latency.mean * 1000,
            "read_bytes_per_slice": read / slices,
            "read_tokens_per_slice": tokens / slices,
            "statements_per_slice": reads / slices,
        }
        self._mark()
        return result


async def turn(rt: Runtime, thread: str, text: str, key: str, timeout_s: float = TURN_TIMEOUT_S) -> None:
    """Send ``text`` and wait until everything it caused is committed.

    A turn that is not done within ``timeout_s`` raises ``TimeoutError``: a runtime that
    stopped making progress fails the benchmark instead of hanging it.
    """
    before = rt.stats.slices
    await rt.send(thread, text, key=key)
    deadline = time.monotonic() + timeout_s
    while True:
        await asyncio.sleep(0.0002)
        idle = rt.stats.slices > before and not rt.scheduler.active and not rt.dispatcher.active
        if idle and not await rt.store.has_work():
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"turn {key!r} on thread {thread!r} not done within {timeout_s:g} s")


async def run_context(
    url: str, messages: int, blob_mb: float, progress: Callable[[int, int], None] | None = None
) -> dict[str, Any]:
    """Both scenarios on ``url``; the figures as a dict."""
    rt = make_runtime(url)
    summary: dict[str, Any] = {"store": url.split(":", 1)[0], "messages": messages, "blob_mb": blob_mb}
    async with rt:
        runner = asyncio.create_task(rt.run())
        try:
            limits = rt.limits["bench"]
            summary["view_budget_tokens"] = limits.max_tokens
            meter = Meter(rt)
            # grow "long" to its length; RSS when it is at about 100 messages and at the end
            turns = messages // 2 - SAMPLE
            for n in range(turns):
                await turn(rt, "long", USER_TEXT.format(n=n, shard=n % 97), f"u{n}")
                if n == 50:
                    trim()
                    summary["rss_at_100_bytes"] = rss_bytes()
                if progress is not None and n % 50 == 0:
                    progress(n, turns)
            trim()
            summary["rss_at_end_bytes"] = rss_bytes()
            # a second thread at ~80 messages, then slices of both, alternating: side by
            # side, so the machine's noise hits both alike
            for n in range(40):
                await turn(rt, "short", USER_TEXT.format(n=n, shard=n % 97), f"s{n}")
            samples: dict[str, list[dict[str, float]]] = {"at_100": [], "at_end": []}
            for n in range(SAMPLE):
                for name, thread_id in (("at_100", "short"), ("at_end", "long")):
                    meter.window()
                    await turn(rt, thread_id, USER_TEXT.format(n=n, shard=n), f"m{n}")
                    samples[name].append(meter.window())
            summary["long"] = {name: median_of(rows) for name, rows in samples.items()}
            summary["short_last_seq"] = (await rt.thread("short")).last_seq
            thread = await rt.thread("long")
            summary["long_last_seq"] = thread.last_seq
            summary["long_tokens"] = thread.tokens

            # large tool outputs: a small reference, then the big one
            blobs: dict[str, dict[str, Any]] = {}
            for name, mb in (("small", 1.0), ("big", blob_mb)):
                thread_id = f"blob-{name}"
                trim()
                rss_before = rss_bytes()
                reset_hwm()
                started = time.perf_counter()
                await turn(rt, thread_id, f"run the job {mb}", f"{name}-job")
                elapsed = time.perf_counter() - started
                meter.window()
                for n in range(SAMPLE):
                    await turn(rt, thread_id, USER_TEXT.format(n=n, shard=n), f"{name}-{n}")
                figures: dict[str, Any] = dict(meter.window())
                trim()
                figures.update(
                    output_mb=mb,
                    tool_round_s=elapsed,
                    rss_before_bytes=rss_before,
                    rss_after_bytes=rss_bytes(),
                    peak_rss_growth_bytes=hwm_bytes() - rss_before,
                )
                blobs[name] = figures
            summary["blob"] = blobs
        finally:
            rt.stop()
            await runner
    at_100, at_end = summary["long"]["at_100"], summary["long"]["at_end"]
    summary["latency_ratio_end_vs_100"] = at_end["slice_ms_p50"] / max(1e-9, at_100["slice_ms_p50"])
    summary["read_tokens_vs_budget_end"] = at_end["read_tokens_per_slice"] / summary["view_budget_tokens"]
    summary["rss_growth_long_bytes"] = summary["rss_at_end_bytes"] - summary["rss_at_100_bytes"]
    big, small = summary["blob"]["big"], summary["blob"]["small"]
    summary["rss_big_vs_small_bytes"] = big["rss_after_bytes"] - small["rss_after_bytes"]
    return summary


def main(argv: list[str] | None = None) -> None:
    """Entry point of the benchmark process: ``python -m dormant.bench.context '{json}'``."""
    params = json.loads((argv or sys.argv[1:])[0])
    out = Path(params["out"])
    out.mkdir(parents=True, exist_ok=True)

    def progress(done: int, total: int) -> None:
        print(f"progress {done} {total}", flush=True)

    with tempfile.TemporaryDirectory(prefix="dormant-bench-context-") as workdir:
        url = store_url(params["kind"], Path(workdir))
        summary = asyncio.run(run_context(url, params["messages"], params["blob_mb"], progress))
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
