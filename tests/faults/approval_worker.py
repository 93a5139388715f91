"""A process of the approval kill tests: ``python -m tests.faults.approval_worker MODE URL RUNS``.

``run``: a worker (scheduler, dispatcher, expiry sweep) until killed. ``decide``: decide
every open wait of threads ``t<n>``: approve the even ones, deny the odd ones, each with
its own decision key (so a restarted decider repeats the same decisions), printing each.
The agent's ``refund`` needs approval and is not idempotent: each run appends its call
id to ``RUNS`` (fsynced) before it answers.
"""

from __future__ import annotations

import asyncio
import os
import sys

from dormant import Agent, ModelReply, ModelRequest, Runtime
from dormant.config import Settings
from dormant.models.scripted import ScriptedModel
from dormant.records import ToolCall
from dormant.tools.spec import ToolContext, tool


def agent(runs: str) -> Agent:
    @tool(mode="async", needs_approval=True)
    async def refund(amount: int, ctx: ToolContext) -> str:
        """Refund an amount (a side effect, counted)."""
        fd = os.open(runs, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, f"{ctx.thread_id} {ctx.call_id}\n".encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return f"refunded {amount}"

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user":
            return ModelReply(
                text="", tool_calls=(ToolCall(id="r", name="refund", arguments='{"amount": 7}'),)
            )
        return ModelReply(text="saw " + last.content)

    return Agent(name="a", model=ScriptedModel(script), tools=[refund])


async def main(mode: str, url: str, runs: str) -> None:
    settings = Settings.build(store=url, poll_s=0.02, lease_s=30.0, retry_base_s=0.05)
    async with Runtime(url, [agent(runs)], settings=settings) as rt:
        if mode == "run":
            print("running", flush=True)
            await rt.run()
            return
        cursor = None
        while True:
            page = await rt.pending(status="all", cursor=cursor, limit=100)
            for wait in page.items:
                n = int(wait.thread_id[1:])
                action = "approve" if n % 2 == 0 else "deny"
                # the same key as a killed decider's: a repeat answers the first (a conflict fails)
                await rt.decide(wait.thread_id, wait.call_id, action, by="ann", note="ok", key=f"d-{n}")
                print("decided", wait.thread_id, flush=True)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        print("done", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
