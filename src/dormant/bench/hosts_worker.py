"""One worker "host" of ``dormant bench hosts``: a dormant runtime against a shared PostgreSQL.

    DORMANT_BENCH_WORKER_STORE=URL python -m dormant.bench.hosts_worker '{"ledger": PATH, "name": "w1", ...}'

(run inside a network namespace by the harness). The agent ``hosts`` answers an input
``THREAD turn K`` by calling ``lookup`` (idempotent) when K is even and ``charge`` (not
idempotent) when K is odd, then closes the turn with ``done: ...``.

The ledger is outside the store: one file per worker, every line appended with
``os.write`` and ``os.fsync`` before the code goes on, so a line is on disk before the
effect it announces (a ``kill -9`` loses nothing written). Lines (times: ``time.time()``):

* ``run TOOL THREAD CALL T``: a tool is about to have its effect;
* ``slice THREAD TOKEN T``: a slice of THREAD under lease TOKEN began;
* ``commit THREAD TOKEN T`` then ``ok|fenced|error THREAD TOKEN T``: its commit began, and
  how it ended (``fenced``: the store refused it, the lease was lost);
* ``cancelled THREAD TOKEN T``: the slice was cancelled (its worker saw its lease lapse).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..errors import LeaseLost
from ..logs import JsonFormatter
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import Claim, CommitPlan, ToolCall
from ..runtime import Runtime
from ..tools.spec import ToolContext, tool
from .chaos_worker import URL_ENV

_ledger_fd = -1


def ledger(line: str) -> None:
    """Append ``line`` and a time to this worker's ledger, durably, before going on."""
    os.write(_ledger_fd, f"{line} {time.time():.6f}\n".encode())
    os.fsync(_ledger_fd)


@tool(mode="async", idempotent=True, timeout=10.0)
async def lookup(q: str, ctx: ToolContext) -> str:
    """Look something up; safe to run again."""
    ledger(f"run lookup {ctx.thread_id} {ctx.call_id}")
    await asyncio.sleep(0.01)
    return f"found {q}"


@tool(mode="async", timeout=10.0)
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge money: not idempotent (the effect is in the ledger before it "happens")."""
    ledger(f"run charge {ctx.thread_id} {ctx.call_id}")
    await asyncio.sleep(0.05)
    return f"charged {amount}"


def script(request: ModelRequest) -> ModelReply:
    """Odd turns charge, even turns look up; a tool result closes the turn."""
    last = request.messages[-1]
    if last.role == "tool":
        return ModelReply(text=f"done: {last.content[:40]}")
    words = last.content.split()
    if len(words) < 3 or not words[2].isdigit():  # a compaction request: summarise
        return ModelReply(text="summary: turns of lookups and charges")
    turn = int(words[2])
    name = "charge" if turn % 2 else "lookup"
    arguments: dict[str, Any] = {"amount": turn} if turn % 2 else {"q": f"item {turn}"}
    return ModelReply(
        text=f"turn {turn}",
        tool_calls=(ToolCall(id=f"{name}{turn}", name=name, arguments=json.dumps(arguments)),),
    )


class LedgerRuntime(Runtime):
    """A runtime whose slices and commits are written to the ledger."""

    async def run_slice(self, claim: Claim) -> None:
        """Ledger the slice's start, then run it."""
        ledger(f"slice {claim.thread_id} {claim.token}")
        try:
            await super().run_slice(claim)
        except asyncio.CancelledError:
            ledger(f"cancelled {claim.thread_id} {claim.token}")
            raise


def ledgered(commit: Any, think_s: float) -> Any:
    """``commit_slice`` with its start and outcome in the ledger, ``think_s`` later (a slice
    that takes as long as a model's reply would, so a fault can land in the middle of one)."""

    async def commit_slice(plan: CommitPlan) -> None:
        await asyncio.sleep(think_s)
        ledger(f"commit {plan.thread_id} {plan.token}")
        try:
            await commit(plan)
        except LeaseLost:
            ledger(f"fenced {plan.thread_id} {plan.token}")
            raise
        except asyncio.CancelledError:
            ledger(f"cancelled {plan.thread_id} {plan.token}")
            raise
        except BaseException:
            ledger(f"error {plan.thread_id} {plan.token}")
            raise
        ledger(f"ok {plan.thread_id} {plan.token}")

    return commit_slice


async def main(config: dict[str, Any]) -> None:
    """Run the runtime until SIGTERM."""
    global _ledger_fd
    handler = logging.StreamHandler(sys.stderr)  # the worker's log: JSON lines, with extras
    handler.setFormatter(JsonFormatter())
    logging.getLogger("dormant").addHandler(handler)
    _ledger_fd = os.open(Path(config["ledger"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    lease_s = float(config.get("lease_s", 3.0))
    settings = Settings.build(
        concurrency=16,
        tool_concurrency=16,
        poll_s=0.05,
        lease_s=lease_s,
        retry_base_s=0.05,
        retry_max_s=0.5,
        worker_id=str(config["name"]),
    )
    agent = Agent(name="hosts", model=ScriptedModel(script), tools=[lookup, charge])
    async with LedgerRuntime(os.environ[URL_ENV], [agent], settings=settings) as rt:
        rt.dispatcher.lease_s = lease_s
        rt.store.commit_slice = ledgered(rt.store.commit_slice, float(config.get("think_s", 0.2)))  # type: ignore[method-assign]
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, rt.stop)
        ledger(f"start {config['name']} {os.getpid()}")
        print("READY", flush=True)
        await rt.run()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
