"""``dormant bench approvals``: waits for a person at rest and in motion, on a SQLite file.

1. RSS of a running runtime (scheduler, dispatcher, expiry sweep) after THREADS turns
   that ran a tool with no approval, then with THREADS more threads each waiting on an
   approval: the waits are rows, so the two figures should match (flat).
2. Listing the oldest 100 open waits (``rt.pending(limit=100)``): p50 / p99 over REPEATS.
3. Decision → run: ``rt.decide(approve)`` of DECIDE waits one at a time, the time until
   the approved call's tool starts (the decision durable, the outbox entry claimed).
4. The expiry sweep: THREADS waits past their deadline (committed by slices through the
   store's operations), the time per 1,000 expired.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import CommitPlan, Message, NewApproval, NewInput, ToolCall, ViewLimits
from ..runtime import Runtime
from ..slices.step import input_message
from ..store import Store
from ..tools.spec import ToolContext, tool
from .scale import rss_bytes, trim


def _agent(started: dict[str, float], ran: asyncio.Event) -> Agent:
    @tool(mode="async", needs_approval=lambda args, ctx: args["amount"] > 100)
    async def refund(amount: int, ctx: ToolContext) -> str:
        """Refund an amount."""
        started[ctx.thread_id] = time.perf_counter()
        ran.set()
        return "ok"

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role != "user":
            return ModelReply(text="done")
        args = json.dumps({"amount": int(last.content)})
        return ModelReply(text="", tool_calls=(ToolCall(id="r", name="refund", arguments=args),))

    return Agent(name="a", model=ScriptedModel(script), tools=[refund])


async def _sweep(store: Store, count: int) -> tuple[int, float]:
    """``count`` waits already past their deadline, committed by slices of the store's own
    operations, then expired by rounds of the sweep: (expired, seconds the rounds took)."""
    now = time.time()  # the store clock of a runtime-made store
    await store.admit(
        [
            NewInput(thread_id=f"due{n}", kind="user", dedup_key="k", content="x", agent="a")
            for n in range(count)
        ]
    )
    while claims := [c for c in await store.claim_threads("bench", 500, 60.0)]:
        if not any(c.thread_id.startswith("due") for c in claims):
            for c in claims:
                await store.release(c)
            break
        for c in claims:
            if not c.thread_id.startswith("due"):
                await store.release(c)  # another thread's work, left for its runtime
                continue
            load = await store.load_slice(c, ViewLimits())
            call = ToolCall(id="w", name="wipe", arguments="{}")
            messages = (
                input_message(load.inputs[0], load.thread.last_seq + 1, now),
                Message(seq=load.thread.last_seq + 2, role="assistant", content="", tool_calls=(call,)),
            )
            wait = NewApproval(call_id="w", tool="wipe", arguments="{}", deadline=now - 1)
            plan = CommitPlan(
                thread_id=c.thread_id,
                token=c.token,
                consumed=tuple(i.id for i in load.inputs),
                messages=messages,
                approvals=(wait,),
                awaiting=1,
            )
            await store.commit_slice(plan)
    t0 = time.perf_counter()
    expired = 0
    while got := (await store.expire_approvals(limit=500))[0]:
        expired += got
    return expired, time.perf_counter() - t0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _settle(rt: Runtime) -> None:
    # the store has no "idle" event to wait on: poll it
    while rt.scheduler.active or rt.dispatcher.active or await rt.store.has_work(list(rt.agents)):  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.3)


async def run_approvals_bench(
    out: Path, threads: int = 1000, decide: int = 200, repeats: int = 200
) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); ``OUT/summary.json`` is written."""
    out.mkdir(parents=True, exist_ok=True)
    db = out / "approvals.db"
    for path in out.glob("approvals.db*"):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    started: dict[str, float] = {}
    ran = asyncio.Event()
    settings = Settings.build(store=f"sqlite:///{db}", poll_s=0.01, concurrency=32, tool_concurrency=32)
    async with Runtime(settings.store, [_agent(started, ran)], settings=settings) as rt:
        runner = asyncio.create_task(rt.run())
        try:
            for n in range(threads):  # small refunds: no approval, the same work otherwise
                await rt.send(f"free{n}", "5", key="k")
            await _settle(rt)
            # the view cache (the byte budget B) and SQLite's page caches hold what was read
            # last, whatever waits: both are let go before each sample
            rt.store.views.clear()
            await rt.store.release_caches()
            trim()
            rss_none = rss_bytes()
            for n in range(threads):
                await rt.send(f"wait{n}", "500", key="k")
            await _settle(rt)
            rt.store.views.clear()
            await rt.store.release_caches()
            trim()
            rss_waiting = rss_bytes()
            opened = (await rt.store.open_approvals())[0]
            listing = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                page = await rt.pending(limit=100)
                listing.append(time.perf_counter() - t0)
            assert len(page.items) == 100
            latencies, commits = [], []
            for wait in (await rt.pending(limit=decide)).items:
                t0 = time.perf_counter()
                await rt.decide(wait.thread_id, wait.call_id, "approve", by="bench")
                commits.append(time.perf_counter() - t0)
                while wait.thread_id not in started:
                    ran.clear()
                    await ran.wait()
                latencies.append(started[wait.thread_id] - t0)
        finally:
            rt.stop()
            await runner
        expired, sweep_s = await _sweep(rt.store, threads)
    summary: dict[str, Any] = {
        "threads": threads,
        "rss_no_waits_mb": round(rss_none / 1e6, 1),
        "rss_waiting_mb": round(rss_waiting / 1e6, 1),
        "open_waits": opened,
        "list_oldest_100_p50_ms": round(statistics.median(listing) * 1000, 3),
        "list_oldest_100_p99_ms": round(_pct(listing, 0.99) * 1000, 3),
        "decide_commit_p50_ms": round(statistics.median(commits) * 1000, 3),
        "decide_to_run_p50_ms": round(statistics.median(latencies) * 1000, 3),
        "decide_to_run_p99_ms": round(_pct(latencies, 0.99) * 1000, 3),
        "expired": expired,
        "sweep_ms_per_1000": round(sweep_s * 1000 / max(1, expired) * 1000, 1),
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
