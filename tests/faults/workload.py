"""The workload the kill -9 test runs in a subprocess, killed and restarted at will.

    python -m tests.faults.workload DB_PATH EFFECTS_PATH THREADS TURNS

Every turn admits one user input per thread (stable dedup keys, so a restarted run
re-admits harmlessly) and runs until idle. Even turns call ``lookup`` (async,
idempotent), odd turns call ``charge`` (async, not idempotent), which appends its
call id to EFFECTS_PATH before answering: the test checks that no charge ran twice.
Prints ``COMPLETE`` when every turn is done.
"""

from __future__ import annotations

import asyncio
import os
import sys

from dormant import Agent, ModelReply, ModelRequest, NewInput, Runtime, ScriptedModel, Settings, ToolCall
from dormant.tools import ToolContext, tool

_effects_fd = -1


@tool(mode="async", idempotent=True)
async def lookup(q: str, ctx: ToolContext) -> str:
    """Look something up; safe to run twice."""
    await asyncio.sleep(0.01)
    return f"found {q}"


@tool(mode="async")
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge money: the effect is recorded first, so a kill after it leaves a trace."""
    os.write(_effects_fd, f"{ctx.call_id}\n".encode())
    await asyncio.sleep(0.03)
    return f"charged {amount}"


def script(request: ModelRequest) -> ModelReply:
    last = request.messages[-1]
    if last.role == "tool":
        return ModelReply(text=f"done: {last.content[:40]}")
    turn = int(last.content.rsplit(" ", 1)[-1])
    call_id = f"call-{request.thread_id}-{turn}"
    if turn % 2 == 0:
        call = ToolCall(id=call_id, name="lookup", arguments=f'{{"q": "item {turn}"}}')
    else:
        call = ToolCall(id=call_id, name="charge", arguments=f'{{"amount": {turn}}}')
    return ModelReply(text="working", tool_calls=(call,))


async def main(db: str, effects: str, threads: int, turns: int) -> None:
    global _effects_fd
    _effects_fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    settings = Settings.build(
        concurrency=16,
        tool_concurrency=16,
        poll_s=0.01,
        lease_s=1.5,
        retry_base_s=0.01,
        retry_max_s=0.1,
        worker_id=f"worker-{os.getpid()}",
    )
    agent = Agent(name="a", model=ScriptedModel(script), tools=[lookup, charge])
    ids = [f"t{i:03d}" for i in range(threads)]
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings) as rt:
        # a crashed worker's running calls are reconciled once their lease expires;
        # keep that short so the test does not wait the default (slowest timeout + 30 s)
        rt.dispatcher.lease_s = 1.5
        for n in range(turns):
            await rt.admit(
                [
                    NewInput(
                        thread_id=t, kind="user", dedup_key=f"turn{n}", content=f"{t} turn {n}", agent="a"
                    )
                    for t in ids
                ]
            )
            await rt.run_until_idle(timeout=120)
    print("COMPLETE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
