"""The runtime with OpenAIChatModel on a loopback server: the shapes that used
to break threads for good go out in a form servers accept, turn after turn."""

from __future__ import annotations

import json
import re

from dormant import Agent, Runtime, tool
from dormant.models.openai import OpenAIChatModel
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings
from tests.openai_server import DONE, Reply, ScriptServer, delta, fresh_breakers, server, text_reply

__all__ = ["fresh_breakers", "server"]  # fixtures, used by name


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def calls_reply(*ids: str) -> Reply:
    pieces = [
        {
            "index": n,
            "id": call_id,
            "type": "function",
            "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'},
        }
        for n, call_id in enumerate(ids)
    ]
    return Reply(
        chunks=[delta({"role": "assistant", "tool_calls": pieces}), delta({}, finish="tool_calls"), DONE]
    )


async def test_an_empty_reply_and_reused_tool_call_ids_do_not_break_the_thread(
    store_url: str, server: ScriptServer
) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0, dialect="mistral")
    server.script(
        Reply(chunks=[delta({"role": "assistant", "content": ""}), delta({}, finish="length"), DONE]),
        calls_reply("call_0"),  # a server that numbers calls call_0 in every reply
        text_reply("3"),
        calls_reply("call_0"),
        text_reply("3 again"),
    )
    agent = Agent(name="a", model=model, tools=[add], builtins=False)
    try:
        async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
            for n, text in enumerate(["think", "add", "add again"]):
                await rt.send("t", text, key=f"k{n}")
                await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert (thread.status, thread.failures) == ("active", 0)
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [m.content for m in history if m.role == "assistant"] == ["", "", "3", "", "3 again"]
    finally:
        await model.aclose()

    last = server.received[-1].body["messages"]
    assert [m["role"] for m in last] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
    ]
    assert last[2] == {"role": "assistant", "content": ""}, "never content: null without tool calls"
    first_id, second_id = last[4]["tool_calls"][0]["id"], last[8]["tool_calls"][0]["id"]
    assert first_id != second_id, "call_0 twice in the view: shown as two ids"
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in (first_id, second_id)), "Mistral's form"
    assert (last[5]["tool_call_id"], last[9]["tool_call_id"]) == (first_id, second_id)
    assert json.loads(last[4]["tool_calls"][0]["function"]["arguments"]) == {"a": 1, "b": 2}
    assert server.received[0].body["max_tokens"] == model.max_output_tokens


def overflow_reply() -> Reply:
    error = {"error": {"message": "Input too long", "code": "context_length_exceeded"}}
    return Reply(status=400, chunks=[json.dumps(error).encode()])


async def test_a_context_overflow_is_retried_once_with_a_smaller_view(
    store_url: str, server: ScriptServer
) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    agent = Agent(name="a", model=model, builtins=False)
    try:
        async with Runtime(store_url, [agent], settings=fast_settings(view_messages=8)) as rt:
            for n in range(3):
                server.script(text_reply(f"answer {n}"))
                await rt.send("t", f"question {n}", key=f"k{n}")
                await rt.run_until_idle(timeout=20)
            refused = len(server.received)
            # the refusal, then whatever the smaller view needs (a summary, the answer)
            server.script(overflow_reply(), *(text_reply("after overflow") for _ in range(3)))
            await rt.send("t", "question 3", key="k3")
            await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert (thread.status, thread.failures) == ("active", 0), "an overflow retried is no failure"
            assert rt.stats.context_overflows == 1
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [m.content for m in history if m.role == "user"].count("question 3") == 1
            assert [m.content for m in history if m.role == "assistant"][-1] == "after overflow"
    finally:
        await model.aclose()
    bodies = [r.body["messages"] for r in server.received[refused:]]
    assert len(bodies[-1]) < len(bodies[0]), "the retry sends a smaller view"


async def test_a_second_context_overflow_fails_the_thread(store_url: str, server: ScriptServer) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    agent = Agent(name="a", model=model, builtins=False)
    server.script(overflow_reply(), overflow_reply(), text_reply("never asked"))
    try:
        async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
            await rt.send("t", "question", key="k")
            await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert thread.status == "failed" and "Input too long" in (thread.error or "")
            assert rt.stats.context_overflows == 1
    finally:
        await model.aclose()
    assert len(server.received) == 2, "retried once, not more"
