"""Text dormant did not write, end to end on every backend:
NUL and lone surrogates in model replies and tool outputs are cleaned the same way
on every store, and a child thread id stays within the limit however long its
parent's id and the call id are."""

from __future__ import annotations

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.inbox import MAX_THREAD_ID_BYTES
from dormant.tools.builtins import child_id
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings

NAME = b"r\xe9sum\xe9.txt".decode("utf-8", "surrogateescape")  # os.listdir of a Latin-1 name
CLEAN_NAME = "r\ufffdsum\ufffd.txt"


@tool
def list_files() -> str:
    """An inline tool whose output holds a lone surrogate and a NUL."""
    return f"{NAME}\x00tail"


@tool(mode="async")
def read_raw() -> bytes:
    """An async tool whose output holds NUL bytes."""
    return b"head\x00\x00tail"


def script(req: ModelRequest) -> ModelReply:
    last = req.messages[-1]
    if last.role == "user":
        calls = (
            ToolCall(id="c1", name="list_files", arguments="{}"),
            ToolCall(id="c2", name="read_raw", arguments="{}"),
        )
        return ModelReply(text="looking\x00 at \udc80", tool_calls=calls)
    if last.role == "tool" and last.tool_call_id == "c1":
        return ModelReply(text="")  # waits for the async call
    return ModelReply(text=f"done: {last.content}\x00")


async def test_nul_and_lone_surrogates_are_cleaned_the_same_on_every_store(store_url: str) -> None:
    agent = Agent(name="a", model=ScriptedModel(script), tools=[list_files, read_raw])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "list them", key="k1")
        await rt.run_until_idle(timeout=20)
        thread = await rt.thread("t1")
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        contents = [m.content for m in history]
        assert contents[1] == "looking at \ufffd"
        assert f"{CLEAN_NAME}tail" in contents
        assert contents[-1] == "done: headtail"
        for message in history:
            assert "\x00" not in message.content
            message.content.encode()  # no lone surrogate left


@pytest.mark.parametrize("call_bytes", [40, 300])
async def test_a_child_of_a_long_thread_id_gets_an_id_within_the_limit(
    store_url: str, call_bytes: int
) -> None:
    parent = "p" * (MAX_THREAD_ID_BYTES - 6)
    call_id = "c" * call_bytes

    def spawner(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if req.thread_id == parent and last.role == "user":
            return ModelReply(
                text="", tool_calls=(ToolCall(id=call_id, name="spawn_thread", arguments='{"task": "t"}'),)
            )
        return ModelReply(text="ok")

    async with Runtime(
        store_url, [Agent(name="a", model=ScriptedModel(spawner))], settings=fast_settings()
    ) as rt:
        await rt.send(parent, "spawn", key="k1")
        await rt.run_until_idle(timeout=20)
        assert (await rt.thread(parent)).failures == 0, "the slice never fails after 'spawned'"
        history = await all_messages(rt.store, parent)
        child = child_id(parent, history[1].tool_calls[0].id)  # the call id as the slice stored it
        assert len(child.encode()) <= MAX_THREAD_ID_BYTES
        assert history[2].content.startswith(f"spawned thread {child}")
        kid = await rt.thread(child)
        assert kid.parent_id == parent
        assert [m.content for m in await all_messages(rt.store, child)] == ["t", "ok"]
