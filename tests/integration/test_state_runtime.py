"""Agent-declared state end to end: an inline tool sets state through its ToolContext,
the change commits with the slice, ``rt.state`` reads it back, ``rt.checkpoint``
writes checkpoints on the run cadence, ``at_seq`` travels back in time."""

from __future__ import annotations

import json

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.journal.rules import CheckpointPolicy
from dormant.tools.spec import ToolContext
from tests.integration.conftest import fast_settings


@tool
def remember_order(order_id: str, ctx: ToolContext) -> str:
    """Note the order the user talks about."""
    ctx.set_state("order_id", order_id)
    if order_id == "none":
        ctx.set_state("order_id", None)
    return "noted"


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user":
        args = json.dumps({"order_id": last.content.split()[-1]})
        call = ToolCall(id=f"c{len(req.messages)}", name="remember_order", arguments=args)
        return ModelReply(text="", tool_calls=(call,))
    return ModelReply(text="done")


async def test_tools_set_state_that_commits_with_the_slice_and_reads_back(store_url: str) -> None:
    agent = Agent(name="a", model=ScriptedModel(script), tools=[remember_order])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        rt.checkpoints = CheckpointPolicy(incremental_runs=1, full_runs=3)
        for n, order in enumerate(["ORD-1", "ORD-2", "none", "ORD-4"]):
            await rt.send("t1", f"about order {order}", key=f"k{n}")
            await rt.run_until_idle(timeout=30)
            if n == 1:
                assert await rt.state("t1") == {"order_id": "ORD-2"}
            head = await rt.checkpoint("t1")
            assert head is not None and head.recoverable
            assert head.kind == ("full" if n in (0, 3) else "incremental"), n
        assert await rt.state("t1") == {"order_id": "ORD-4"}
        entries = (await rt.store.journal.entries("t1", limit=100)).items
        changes = [(e.kind, e.key, e.run) for e in entries if e.key is not None]
        assert changes == [
            ("update", "order_id", 1),
            ("update", "order_id", 2),
            ("update", "order_id", 3),
            ("delete", "order_id", 3),
            ("update", "order_id", 4),
        ], "one run per user turn; the changes of a tool commit in its slice, in order"
        seq_of_ord2 = next(e.seq for e in entries if e.run == 2 and e.key)
        assert await rt.state("t1", at_seq=seq_of_ord2) == {"order_id": "ORD-2"}
        figures = await rt.store.journal.figures("t1", rt.clock())
        assert figures.pending_changes == 0 and figures.recovery_s < 1
