"""A worker whose tool kills it, for the poison-pill tests.

    python -m tests.faults.poison_worker URL DIR MODE     # MODE: async | inline

The agent calls ``crash`` once; the tool appends a line to ``DIR/crashes.log`` and
ends its process with ``os._exit`` (as an out-of-memory kill would), so the call (an
idempotent async tool) or the slice (an inline tool) never ends normally. When the
store has nothing left to do, the process prints the thread's status, the outbox
statuses and the result the agent was shown, as one JSON line, and exits 0.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.tools.spec import tool
from tests.faults.worker import append, settings

#: tool attempts (async) and model retries (slices) of the poison-pill workers
CAP = 2


async def main(url: str, work: Path, mode: str) -> None:
    """Run the poisoned thread until the store is idle; print what became of it."""

    @tool(mode="async" if mode == "async" else "inline", idempotent=True)
    async def crash() -> str:
        """Kill this worker, every time."""
        append(work / "crashes.log", f"{mode} {os.getpid()}")
        os._exit(137)

    seen: list[str] = []

    def script(request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="c", name="crash", arguments="{}"),))
        seen.append(last.content)
        return ModelReply(text="noted")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[crash])
    overrides = {"lease_s": 0.3, "tool_attempts": CAP, "model_retries": CAP, "concurrency": 2}
    async with Runtime(url, [agent], settings=settings("poison", **overrides)) as rt:
        rt.dispatcher.lease_s = 0.3  # a dead worker's call lease runs out soon
        await rt.send("t", "go", key="k")
        await rt.run_until_idle(timeout=30)
        thread = await rt.thread("t")
        outbox = [(e.status, e.attempts) for e in (await rt.store.list_outbox()).items]
    print(json.dumps({"status": thread.status, "error": thread.error, "outbox": outbox, "seen": seen}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
