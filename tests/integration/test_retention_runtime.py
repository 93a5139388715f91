"""Retention and time travel in a running runtime: the background pass cuts old tool
results while the runtime runs, the governor's warn hook starts a pass that writes
checkpoints, ``rt.fork`` and ``rt.rewind`` branch a thread without changing it, and
the checkpoint settings come from ``DORMANT_CHECKPOINT_*``."""

from __future__ import annotations

import asyncio
import json

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.config import Settings
from dormant.retention.policy import NOTE, RetentionPolicy
from dormant.tools.spec import ToolContext
from tests.helpers import all_messages, eventually
from tests.integration.conftest import fast_settings


@tool
def remember_order(order_id: str, ctx: ToolContext) -> str:
    """Note the order the user talks about."""
    ctx.set_state("order_id", order_id)
    return "noted " + "x" * 2000


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user":
        args = json.dumps({"order_id": last.content.split()[-1]})
        call = ToolCall(id=f"c{len(req.messages)}", name="remember_order", arguments=args)
        return ModelReply(text="", tool_calls=(call,))
    return ModelReply(text="done")


def agent() -> Agent:
    return Agent(name="a", model=ScriptedModel(script), tools=[remember_order])


async def orders(rt: Runtime, thread: str, names: list[str]) -> None:
    for name in names:
        await rt.send(thread, f"about order {name}", key=f"{thread}-{name}")
        await rt.run_until_idle(timeout=30)


async def test_the_background_pass_cuts_old_results_while_running(store_url: str) -> None:
    settings = fast_settings(retention_interval_s=0.05)
    async with Runtime(store_url, [agent()], settings=settings) as rt:
        await orders(rt, "t", ["A", "B", "C"])  # passes run, but keep 200 results whole
        assert all(not m.content.endswith(NOTE) for m in await all_messages(rt.store, "t"))
        rt.retention = RetentionPolicy.long_run(full_tool_calls=1, head_chars=20)
        runner = asyncio.create_task(rt.run())
        try:

            async def cut() -> bool:
                results = [m for m in await all_messages(rt.store, "t") if m.role == "tool"]
                return [m.content.endswith(NOTE) for m in results] == [True, True, False]

            await eventually(cut, timeout=20)

            async def passed() -> bool:
                return rt.retainer is not None and rt.retainer.passes >= 1

            await eventually(passed, timeout=20)
        finally:
            rt.stop()
            await asyncio.wait_for(runner, 10)  # the pass stops within a round


async def test_the_warn_hook_starts_a_pass_that_checkpoints(store_url: str) -> None:
    settings = fast_settings(retention_interval_s=0, rss_limit="64G")
    async with Runtime(store_url, [agent()], settings=settings) as rt:
        await orders(rt, "t", ["A"])
        assert (await rt.store.journal.figures("t", rt.clock())).last_checkpoint_age_s is None
        runner = asyncio.create_task(rt.run())
        try:

            async def started() -> bool:
                return rt.retainer is not None

            await eventually(started, timeout=10)
            assert rt.governor is not None
            for hook in rt.governor.handles.on_warn:  # what the governor runs on entering warn
                hook(object())  # type: ignore[arg-type]

            async def checkpointed() -> bool:
                return (await rt.store.journal.figures("t", rt.clock())).last_checkpoint_age_s is not None

            await eventually(checkpointed, timeout=20)
        finally:
            rt.stop()
            await asyncio.wait_for(runner, 10)


async def test_fork_and_rewind_branch_without_changing_the_thread(store_url: str) -> None:
    async with Runtime(store_url, [agent()], settings=fast_settings()) as rt:
        await orders(rt, "t", ["A", "B"])
        full = await rt.store.journal.checkpoint("t", "full")  # state ORD B, at the end of turn 2
        assert full is not None
        await orders(rt, "t", ["C"])
        history = await all_messages(rt.store, "t")
        end_of_a = 4  # user, call, result, reply
        fork = await rt.fork("t", end_of_a)
        assert (fork.parent_id, fork.parent_seq) == ("t", end_of_a)
        assert await rt.state(fork.id) == {"order_id": "A"}
        back = await rt.rewind("t", full, new_id="t-back")
        assert back.id == "t-back" and back.parent_seq == full.msg_seq == 8
        assert await rt.state("t-back") == {"order_id": "B"}
        assert await rt.state("t") == {"order_id": "C"}, "the thread itself is not changed"
        assert await all_messages(rt.store, "t") == history
        await orders(rt, fork.id, ["D"])  # the branch goes on by itself
        assert await rt.state(fork.id) == {"order_id": "D"}
        assert await rt.state("t") == {"order_id": "C"}
        with pytest.raises(Exception, match="not a recoverable checkpoint"):
            await rt.rewind("t", 1)


def test_checkpoint_and_retention_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_CHECKPOINT_FULL_RUNS", "7")
    monkeypatch.setenv("DORMANT_CHECKPOINT_INCREMENTAL_S", "60")
    monkeypatch.setenv("DORMANT_RETENTION_FULL_RUNS", "3")
    monkeypatch.setenv("DORMANT_DEDUP_HORIZON_S", "3600")
    rt = Runtime("memory://", [agent()], settings=Settings.from_env())
    assert (rt.checkpoints.full_runs, rt.checkpoints.incremental_s, rt.checkpoints.incremental_runs) == (
        7,
        60,
        3,
    )
    assert (rt.retention.full_runs, rt.retention.dedup_horizon_s, rt.retention.full_tool_calls) == (
        3,
        3600,
        200,
    )
