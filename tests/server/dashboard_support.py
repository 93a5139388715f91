"""A served runtime for the dashboard's tests: two tenants, an operator token, a model
that fails on demand (so a thread can fail, then succeed when retried)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from dormant.agent import Agent
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.server import ServerConfig
from tests.server.support import Served, serve

ADMIN = "operator-token-for-tests-0123456789"


class Flaky:
    """Replies ``echo: <text>``; raises while ``failing`` and the text is ``boom``."""

    def __init__(self) -> None:
        self.failing = True

    def script(self, request: ModelRequest) -> ModelReply:
        text = request.messages[-1].content
        if self.failing and text == "boom":
            raise RuntimeError("the model broke on purpose")
        return ModelReply(text=f"echo: {text}")


@asynccontextmanager
async def dashboard(flaky: Flaky) -> AsyncIterator[Served]:
    """A server with the dashboard, the operator token :data:`ADMIN`, samples every 0.2 s."""
    config = ServerConfig(poll_s=0.2, heartbeat_s=1.0, admin_token=ADMIN, ui_sample_s=0.2)
    async with serve([Agent(name="assistant", model=ScriptedModel(flaky.script))], config=config) as s:
        yield s


async def settle(s: Served, thread_id: str, *, want: str, timeout: float = 10.0) -> None:
    """Wait until the stored thread's status is ``want``."""
    async with asyncio.timeout(timeout):
        while True:
            thread = await s.runtime.store.get_thread(thread_id)
            if thread.status == want and not thread.leased and (want == "failed" or thread.last_seq):
                return
            await asyncio.sleep(0.05)
