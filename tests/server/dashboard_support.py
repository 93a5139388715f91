"""A served runtime for the dashboard's tests: two tenants, an operator token, a model
that fails on demand (so a thread can fail, then succeed when retried)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dormant.agent import Agent
from dormant.errors import ToolError
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.records import ToolCall
from dormant.server import ServerConfig
from dormant.tools import tool
from dormant.tools.builtins import ASK_USER_TOOL
from tests.server.support import Served, serve

ADMIN = "operator-token-for-tests-0123456789"


@tool(mode="async", idempotent=True)
async def broken(order: str) -> str:
    """An async tool whose every attempt fails: with one attempt allowed, its call is
    dead-lettered."""
    raise ToolError(f"the tool broke on {order}", retryable=True)


class Flaky:
    """Replies ``echo: <text>``; raises while ``failing`` and the text is ``boom``; calls
    the failing async tool ``broken`` when the text is ``call``."""

    def __init__(self) -> None:
        self.failing = True

    def script(self, request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.role == "tool":
            return ModelReply(text=f"tool said: {last.content}")
        if last.content == "call":
            return ModelReply(
                text="", tool_calls=(ToolCall(id="c1", name="broken", arguments='{"order": "o1"}'),)
            )
        if self.failing and last.content == "boom":
            raise RuntimeError("the model broke on purpose")
        return ModelReply(text=f"echo: {last.content}")


@asynccontextmanager
async def dashboard(flaky: Flaky) -> AsyncIterator[Served]:
    """A server with the dashboard, the operator token :data:`ADMIN`, samples every 0.2 s."""
    config = ServerConfig(poll_s=0.2, heartbeat_s=1.0, admin_token=ADMIN, ui_sample_s=0.2)
    agent = Agent(name="assistant", model=ScriptedModel(flaky.script), tools=[broken])
    async with serve([agent], config=config, tool_attempts=1) as s:
        yield s


async def settle(s: Served, thread_id: str, *, want: str, timeout: float = 10.0) -> None:
    """Wait until the stored thread's status is ``want``."""
    async with asyncio.timeout(timeout):
        while True:
            thread = await s.runtime.store.get_thread(thread_id)
            if thread.status == want and not thread.leased and (want == "failed" or thread.last_seq):
                return
            await asyncio.sleep(0.05)


PAID: list[int] = []


@tool(mode="async", needs_approval=True)
async def pay(amount: int, memo: str) -> str:
    """Pay an amount (waits for a person's approval)."""
    PAID.append(amount)
    return f"paid {amount}"


def waiting_script(request: ModelRequest) -> ModelReply:
    """``pay N memo`` calls ``pay``; ``ask`` asks red or blue, ``ask free`` asks in free
    text; a tool result is replied to as ``tool said: ...``."""
    last = request.messages[-1]
    if last.role == "tool":
        return ModelReply(text=f"tool said: {last.content}")
    words = last.content.split(" ", 2)
    if words[0] == "pay":
        args = json.dumps({"amount": int(words[1]), "memo": words[2] if len(words) > 2 else ""})
        return ModelReply(text="", tool_calls=(ToolCall(id="p", name="pay", arguments=args),))
    if words[0] == "ask":
        q = {"question": "which colour?"} | (
            {} if last.content == "ask free" else {"choices": ["red", "blue"]}
        )
        return ModelReply(text="", tool_calls=(ToolCall(id="q", name="ask_user", arguments=json.dumps(q)),))
    return ModelReply(text=f"saw {last.content}")


@asynccontextmanager
async def waiting_dashboard() -> AsyncIterator[Served]:
    """A dashboard whose agent ``assistant`` calls ``pay`` (approval) and ``ask_user``."""
    config = ServerConfig(poll_s=0.2, heartbeat_s=1.0, admin_token=ADMIN, ui_sample_s=0.2)
    agent = Agent(name="assistant", model=ScriptedModel(waiting_script), tools=[pay, ASK_USER_TOOL])
    async with serve([agent], config=config) as s:
        yield s
