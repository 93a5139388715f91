"""``dormant approvals`` and ``dormant answer`` in a subprocess, on a store where a
thread waits for a person."""

from __future__ import annotations

import asyncio
import json

from dormant import Agent, ModelReply, ModelRequest, Runtime
from dormant.models.scripted import ScriptedModel
from dormant.records import ToolCall
from dormant.tools.builtins import ASK_USER_TOOL
from dormant.tools.spec import tool
from tests.acceptance.runner import Cli


@tool(mode="async", needs_approval=True)
async def refund(amount: int) -> str:
    """Refund an amount."""
    return f"refunded {amount}"


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user" and last.content == "ask":
        args = json.dumps({"question": "which?", "choices": ["red", "blue"]})
        return ModelReply(text="", tool_calls=(ToolCall(id="q", name="ask_user", arguments=args),))
    if last.role == "user":
        return ModelReply(text="", tool_calls=(ToolCall(id="r", name="refund", arguments='{"amount": 5}'),))
    return ModelReply(text="saw " + last.content)


async def waiting(store: str) -> dict[str, str]:
    agent = Agent(name="a", model=ScriptedModel(script), tools=[refund, ASK_USER_TOOL])
    async with Runtime(store, [agent]) as rt:
        for thread in ("t1", "t2", "t3"):
            await rt.send(thread, "ask" if thread == "t3" else "refund", key="k")
        await rt.run_until_idle(timeout=20)
        return {a.thread_id: a.call_id for a in (await rt.pending()).items}


def test_list_show_approve_deny_answer(cli: Cli) -> None:
    calls = asyncio.run(waiting(cli.store))
    assert sorted(calls) == ["t1", "t2", "t3"]
    assert "waiting for a person" in cli.ok("status")
    listed = cli.ok("approvals", "list")
    assert "refund" in listed and "ask_user" in listed and listed.count("│ requested") == 3
    approved = cli.ok("approvals", "approve", "t1", calls["t1"], "--by", "ann")
    assert "approved" in approved and "ann" in approved
    denied = cli.ok("approvals", "deny", "t2", calls["t2"], "--by", "bob", "--note", "no")
    assert "denied" in denied
    again = cli("approvals", "approve", "t2", calls["t2"])
    assert again.returncode != 0 and "already denied" in again.stderr
    wrong = cli("answer", "t3", calls["t3"], "green")
    assert wrong.returncode != 0 and "one of" in wrong.stderr
    assert "answered" in cli.ok("answer", "t3", calls["t3"], "red")
    assert "note: no" in cli.ok("approvals", "show", "t2", calls["t2"])
    assert cli.ok("approvals", "list").count("│ requested") == 0
    assert cli.ok("approvals", "list", "--status", "all").count("ann") == 1
    missing = cli("approvals", "show", "t1", "nope")
    assert missing.returncode != 0
