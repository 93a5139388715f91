"""A worker whose agent calls two MCP servers and never sees the answers (the test kills it).

    python -m tests.faults.mcp_worker DB DIR EVERYTHING_JS

Thread ``long`` calls server-everything's ``trigger-long-running-operation`` (annotated
``idempotentHint``: it may run again); thread ``pay`` calls the faulty server's ``slow``
tool (no hint: it must not), which logs each call to DIR/calls.log with its call id.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.tools.mcp import McpServer
from tests.faults.worker import settings
from tests.mcp_servers import faulty_server

CALLS = {
    "long": ("everything__trigger-long-running-operation", {"duration": 8, "steps": 16}),
    "pay": ("faulty__slow", {"seconds": 8}),
}


def script(request: ModelRequest) -> ModelReply:
    """Call the thread's tool, then repeat its result."""
    last = request.messages[-1]
    if last.role == "user":
        name, args = CALLS[request.thread_id]
        return ModelReply(text="", tool_calls=(ToolCall(id="c", name=name, arguments=json.dumps(args)),))
    return ModelReply(text=f"after: {last.content}")


def servers(work: Path, everything_js: str) -> list[McpServer]:
    """The two servers, each with a 5 s idle timeout (progress keeps them going)."""
    node = shutil.which("node") or "node"
    return [
        McpServer(name="everything", command=node, args=(everything_js, "stdio"), timeout=5.0),
        faulty_server(work, timeout=5.0),
    ]


async def main(db: str, work: Path, everything_js: str) -> None:
    agent = Agent(name="a", model=ScriptedModel(script), mcp=servers(work, everything_js))
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings("mcp")) as rt:
        rt.dispatcher.lease_s = 0.5  # so the next worker reconciles soon after the kill
        for thread in CALLS:
            await rt.send(thread, "go", key="k")
        await rt.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
