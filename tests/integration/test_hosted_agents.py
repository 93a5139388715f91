"""Heterogeneous workers on one store: a worker without an agent leaves
that agent's threads alone (they wait, and ``status`` says so) instead of failing them;
a worker that hosts the agent then runs them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, NewInput, Runtime, ScriptedModel
from tests.integration.conftest import fast_settings


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store two runtimes share."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/shared.db"


def echo(name: str) -> Agent:
    def script(request: ModelRequest) -> ModelReply:
        return ModelReply(text=f"{name} saw {request.messages[-1].content}")

    return Agent(name=name, model=ScriptedModel(script))


async def test_a_thread_whose_agent_no_worker_hosts_waits_until_one_does(shared_url: str) -> None:
    async with Runtime(shared_url, [echo("a")], settings=fast_settings(worker_id="wa")) as only_a:
        await only_a.send("ta", "hi", key="k", agent="a")
        # another service (hosting b) admitted this one
        await only_a.store.admit(
            [NewInput(thread_id="tb", kind="user", dedup_key="k", content="hello", agent="b")]
        )
        runner = asyncio.create_task(only_a.run())
        for _ in range(200):
            if (await only_a.thread("ta")).last_seq == 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.3)  # time to claim tb too, if it would
        only_a.stop()
        await runner
        waiting = await only_a.thread("tb")
        assert (waiting.status, waiting.last_seq, waiting.failures) == ("active", 0, 0)
        assert (await only_a.store.status()).ready_by_agent == {"b": 1}
    async with Runtime(shared_url, [echo("b")], settings=fast_settings(worker_id="wb")) as only_b:
        await only_b.run_until_idle(timeout=20)
        page = await only_b.history("tb")
        assert [m.content for m in page.items] == ["hello", "b saw hello"]
