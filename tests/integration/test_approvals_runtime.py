"""Waits for a person, end to end with the scripted model: a call that needs approval
runs only once approved (with the edited arguments when edited), a denied or expired
one never runs and the model sees why, ``ask_user`` waits for an answer."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ToolCall
from dormant.errors import DecisionConflict, InvalidInput, UsageError
from dormant.models.scripted import ScriptedModel
from dormant.tools.builtins import ASK_USER_TOOL
from dormant.tools.spec import ApprovalPolicy, ToolContext, tool
from tests.helpers import all_messages
from tests.integration.conftest import fast_settings


def agent_with(runs: list[int], **policy: Any) -> Agent:
    @tool(
        mode="async", needs_approval=lambda args, ctx: args["amount"] > 100, approval=ApprovalPolicy(**policy)
    )
    async def refund(amount: int) -> str:
        """Refund an amount (a side effect: counted)."""
        runs.append(amount)
        return f"refunded {amount}"

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user" and last.content.startswith("ask"):
            question = json.dumps({"question": "which?", "choices": ["red", "blue"]})
            return ModelReply(text="", tool_calls=(ToolCall(id="q1", name="ask_user", arguments=question),))
        if last.role == "user" and last.content.isdigit():
            args = json.dumps({"amount": int(last.content)})
            return ModelReply(text="", tool_calls=(ToolCall(id="r1", name="refund", arguments=args),))
        return ModelReply(text="model saw: " + last.content)

    return Agent(name="a", model=ScriptedModel(script), tools=[refund, ASK_USER_TOOL])


async def replies(rt: Runtime, thread: str) -> list[str]:
    return [m.content for m in await all_messages(rt.store, thread) if m.role == "assistant" and m.content]


async def test_a_policy_lets_small_calls_run_and_holds_large_ones(store_url: str) -> None:
    runs: list[int] = []
    async with Runtime(store_url, [agent_with(runs)], settings=fast_settings()) as rt:
        await rt.send("small", "50", key="k")
        await rt.send("big", "500", key="k")
        await rt.run_until_idle(timeout=10)
        assert runs == [50]
        pending = (await rt.pending()).items
        assert [(p.thread_id, p.tool, p.status) for p in pending] == [("big", "refund", "requested")]
        call_id = pending[0].call_id
        with pytest.raises(InvalidInput):
            await rt.decide("big", call_id, "edit", args={"amount": "lots"})
        await rt.decide("big", call_id, "edit", args={"amount": 200}, by="ann", note="cap it")
        await rt.run_until_idle(timeout=10)
        await rt.decide("big", call_id, "edit", args={"amount": 200}, by="ann", note="cap it")  # a retry
        with pytest.raises(DecisionConflict):
            await rt.decide("big", call_id, "deny", by="bob")
        await rt.run_until_idle(timeout=10)
        assert runs == [50, 200], "the edited call ran exactly once"
        assert (await replies(rt, "big"))[-1] == "model saw: refunded 200"
        assert (await rt.approval("big", call_id)).decided_arguments == '{"amount":200}'


async def test_a_denied_call_never_runs_and_the_model_hears_who_and_why(store_url: str) -> None:
    runs: list[int] = []
    async with Runtime(store_url, [agent_with(runs)], settings=fast_settings()) as rt:
        await rt.send("t", "500", key="k")
        await rt.run_until_idle(timeout=10)
        wait = (await rt.pending()).items[0]
        await rt.decide("t", wait.call_id, "deny", by="ann", note="over the limit")
        await rt.run_until_idle(timeout=10)
        assert runs == []
        last = (await replies(rt, "t"))[-1]
        assert "denied by ann" in last and "over the limit" in last


async def test_an_expired_call_never_runs_and_is_not_a_denial(store_url: str) -> None:
    runs: list[int] = []
    async with Runtime(store_url, [agent_with(runs, deadline_s=0.3)], settings=fast_settings()) as rt:
        await rt.send("t", "500", key="k")
        await rt.run_until_idle(timeout=10)
        wait = (await rt.pending()).items[0]
        assert wait.deadline == pytest.approx(wait.requested_at + 0.3, abs=0.2)
        await asyncio.sleep(0.4)
        assert await rt.store.expire_approvals() == (1, 0)
        await rt.run_until_idle(timeout=10)
        assert runs == []
        assert (await rt.approval("t", wait.call_id)).status == "expired"
        assert "expired waiting for approval" in (await replies(rt, "t"))[-1]


async def test_ask_user_waits_for_an_answer_among_its_choices(store_url: str) -> None:
    async with Runtime(store_url, [agent_with([])], settings=fast_settings()) as rt:
        await rt.send("t", "ask me", key="k")
        await rt.run_until_idle(timeout=10)
        question = (await rt.pending(tool="ask_user")).items[0]
        assert question.kind == "question"
        await rt.send("t", "meanwhile", key="k2")  # queued behind the open question
        await rt.run_until_idle(timeout=10)
        assert (await rt.thread("t")).awaiting == 1
        with pytest.raises(InvalidInput):
            await rt.answer("t", question.call_id, "green")
        with pytest.raises(UsageError):
            await rt.decide("t", question.call_id, "approve")
        await rt.answer("t", question.call_id, "blue", by="ann")
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, "t")
        assert [m.content for m in history if m.role == "tool"] == ["blue"]
        assert (await replies(rt, "t"))[-1] == "model saw: meanwhile"
        assert (await rt.approval("t", question.call_id)).status == "answered"


def test_a_broken_policy_asks() -> None:
    from dormant.approvals import needs_approval

    def broken(args: dict[str, Any], ctx: ToolContext) -> bool:
        raise RuntimeError("boom")

    @tool(needs_approval=broken)
    def act() -> str:
        """Act."""
        return "done"

    assert needs_approval(act, {}, ToolContext(thread_id="t", call_id="c", agent="a"))
