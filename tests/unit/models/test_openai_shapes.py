"""Request and reply shapes that real OpenAI-compatible servers reject or send,
asserted as exact request bodies on a loopback server (:mod:`tests.openai_server`)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from dormant.errors import ModelError
from dormant.models.base import ModelReply, ModelRequest, Usage
from dormant.models.openai import OpenAIChatModel
from dormant.models.wire import CONTINUED, SUMMARY_PREFIX
from dormant.records import Message, SliceLoad, Thread, ToolCall
from dormant.slices import compaction
from tests.openai_server import (
    DONE,
    Reply,
    ScriptServer,
    delta,
    fresh_breakers,
    make_model,
    make_request,
    no_env_key,
    run,
    server,
    sse,
    text_reply,
)

__all__ = ["fresh_breakers", "no_env_key", "server"]  # fixtures, used by name


def user(seq: int, text: str) -> Message:
    return Message(seq=seq, role="user", content=text)


def assistant(seq: int, text: str, *calls: ToolCall) -> Message:
    return Message(seq=seq, role="assistant", content=text, tool_calls=calls)


def result(seq: int, call_id: str, text: str) -> Message:
    return Message(seq=seq, role="tool", content=text, tool_call_id=call_id, name="f")


async def sent(server: ScriptServer, request: ModelRequest, **options: Any) -> dict[str, Any]:
    """The body ``request`` goes out as (the server answers "ok")."""
    server.script(text_reply("ok"))
    await run(make_model(server, **options), request)
    return server.received[-1].body


# --------------------------------------------------------------------------- bug 1: empty replies


async def test_an_empty_assistant_reply_goes_back_as_an_empty_string_not_null(server: ScriptServer) -> None:
    """OpenAI refuses ``content: null`` without tool calls with a 400 that breaks the thread."""
    request = make_request(user(1, "think hard"), assistant(2, ""), user(3, "and?"))
    body = await sent(server, request)
    assert body["messages"] == [
        {"role": "user", "content": "think hard"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "and?"},
    ]


# --------------------------------------------------------------------------- bug 2: one system message


async def test_the_summary_goes_inside_the_one_system_message(server: ScriptServer) -> None:
    request = ModelRequest(
        thread_id="t", system="Be terse.", summary="Earlier: X.", messages=(user(9, "go on"),)
    )
    body = await sent(server, request)
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert body["messages"][0]["content"] == f"Be terse.\n\n{SUMMARY_PREFIX}Earlier: X."
    alone = ModelRequest(thread_id="t", system="", summary="Earlier: X.", messages=(user(9, "go on"),))
    assert (await sent(server, alone))["messages"][0] == {
        "role": "system",
        "content": SUMMARY_PREFIX + "Earlier: X.",
    }


def compaction_request() -> ModelRequest:
    """What compaction sends for a view that ends with a user message, after a summary."""
    view = (
        assistant(5, "about X"),
        user(6, "more on X"),
        assistant(7, "X is Y"),
        user(8, "and Z?"),
        user(9, "hello?"),
    )
    thread = Thread(id="t", agent="a", last_seq=9, summary_seq=4)
    load = SliceLoad(thread=thread, view=view, inputs=(), summary=None, inherited=0)
    load = SliceLoad(
        thread=thread,
        view=view,
        inputs=(),
        summary=compaction.summary(load, 0, "the old part", 0, 0.0),
        inherited=0,
    )
    return compaction.request(load, len(view) - 1, compaction.DEFAULT_PROMPT, 100)


async def test_a_strict_dialect_gets_alternating_roles_after_one_system_message(server: ScriptServer) -> None:
    """Gemma's and Mistral's templates require user/assistant alternation; the compaction
    request used to end with two user messages in a row (three here)."""
    body = await sent(server, compaction_request(), dialect="strict")
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert body["messages"][1] == {"role": "user", "content": CONTINUED}, (
        "a view may start with the assistant"
    )
    assert body["messages"][-1]["content"] == f"and Z?\n\nhello?\n\n{compaction.INSTRUCTION}"
    assert body["messages"][0]["content"].endswith(SUMMARY_PREFIX + "the old part")


async def test_a_generic_dialect_keeps_messages_as_they_are(server: ScriptServer) -> None:
    body = await sent(server, compaction_request())
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "assistant", "user", "assistant", "user", "user", "user"]


async def test_strict_alternation_keeps_tool_calls_and_results_apart(server: ScriptServer) -> None:
    call = ToolCall(id="abc.2.0", name="f", arguments="{}")
    request = make_request(
        user(1, "a"), assistant(2, "", call), result(3, "abc.2.0", "r"), assistant(4, "x"), assistant(5, "y")
    )
    body = await sent(server, request, dialect="strict")
    assert body["messages"] == [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "abc", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "abc", "content": "r"},
        {"role": "assistant", "content": "x\n\ny"},
    ]


# --------------------------------------------------------------------------- bug 3: tool-call ids


def calls_and_results(*internal: str) -> ModelRequest:
    messages: list[Message] = [user(1, "go")]
    seq = 1
    for call_id in internal:
        messages.append(assistant(seq + 1, "", ToolCall(id=call_id, name="f", arguments="{}")))
        messages.append(result(seq + 2, call_id, "r"))
        seq += 2
    return make_request(*messages)


def shown_ids(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, result's call id) pairs as the model sees them."""
    messages = body["messages"]
    return [
        (m["tool_calls"][0]["id"], messages[i + 1]["tool_call_id"])
        for i, m in enumerate(messages)
        if m.get("tool_calls")
    ]


async def test_the_model_sees_its_own_ids_where_they_are_unique_and_compliant(server: ScriptServer) -> None:
    body = await sent(server, calls_and_results("call_Ab1.2.0", "call_Xy2.4.0"))
    assert shown_ids(body) == [("call_Ab1", "call_Ab1"), ("call_Xy2", "call_Xy2")]


async def test_reused_and_long_ids_are_replaced_by_compliant_stable_ones(server: ScriptServer) -> None:
    """Servers that number calls call_0 in every reply, and ids over OpenAI's 40 characters."""
    long = "x" * 41
    body = await sent(server, calls_and_results("call_0.2.0", "call_0.4.0", f"{long}.6.0"))
    ids = shown_ids(body)
    assert all(call == answer for call, answer in ids), "each result answers its own call"
    shown = [call for call, _ in ids]
    assert len(set(shown)) == 3
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", call_id) for call_id in shown)
    again = await sent(server, calls_and_results("call_0.2.0", "call_0.4.0", f"{long}.6.0"))
    assert shown_ids(again) == ids, "the same view, the same ids (prompt caches keep hitting)"


async def test_mistral_ids_are_nine_alphanumerics(server: ScriptServer) -> None:
    body = await sent(
        server, calls_and_results("AbCdE1234.2.0", "call_1.4.0", "AbCdE1234.6.1"), dialect="mistral"
    )
    ids = shown_ids(body)
    assert all(call == answer for call, answer in ids)
    assert all(re.fullmatch(r"[A-Za-z0-9]{9}", call) for call, _ in ids)
    assert len({call for call, _ in ids}) == 3


async def test_a_streamed_tool_call_without_an_id_gets_one(server: ScriptServer) -> None:
    piece = {"index": 0, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    server.script(Reply(chunks=[delta({"tool_calls": [piece]}), delta({}, finish="tool_calls"), DONE]))
    reply = await run(make_model(server))
    (call,) = reply.tool_calls
    assert (call.name, call.arguments) == ("f", "{}")
    assert re.fullmatch(r"call_[0-9a-f]{24}", call.id)


# --------------------------------------------------------------------------- caps and pass-through


async def test_the_output_cap_and_usage_request_are_sent(server: ScriptServer) -> None:
    body = await sent(server, make_request(), max_output_tokens=321, temperature=0.5)
    assert body == {
        "model": "test-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 321,
        "temperature": 0.5,
    }
    openai = await sent(server, make_request(), max_output_tokens=321, dialect="openai")
    assert openai["max_completion_tokens"] == 321 and "max_tokens" not in openai


async def test_extra_body_passes_through(server: ScriptServer) -> None:
    extra = {
        "response_format": {"type": "json_object"},
        "seed": 7,
        "stop": ["\n\n"],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "reasoning_effort": "low",
        "max_tokens": 99,
    }
    body = await sent(server, make_request(), extra_body=extra)
    assert {key: body[key] for key in extra} == extra, "extra_body wins, even over the cap"
    with pytest.raises(ValueError, match="messages"):
        make_model(server, extra_body={"messages": []})


def test_the_dialect_is_chosen_by_host() -> None:
    official = OpenAIChatModel(model="gpt-4o", base_url="https://api.openai.com/v1")
    local = OpenAIChatModel(model="qwen", base_url="http://127.0.0.1:8000/v1")
    assert (official.dialect.name, local.dialect.name) == ("openai", "generic")
    with pytest.raises(Exception, match="unknown model dialect"):
        OpenAIChatModel(model="m", base_url="http://h/v1", dialect="nope")


# --------------------------------------------------------------------------- what comes back


def usage_chunk(prompt: int, completion: int, cached: int) -> bytes:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    usage["prompt_tokens_details"] = {"cached_tokens": cached}  # type: ignore[assignment]
    return sse({"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": usage})


async def test_usage_finish_reason_and_reasoning_come_back_apart_from_the_answer(
    server: ScriptServer,
) -> None:
    server.script(
        Reply(
            chunks=[
                delta({"role": "assistant", "reasoning_content": "Let me think. "}),
                delta({"reasoning": "Done thinking."}),
                delta({"content": "The answer"}),
                delta({}, finish="length"),
                usage_chunk(120, 30, 64),
                DONE,
            ]
        )
    )
    reply = await run(make_model(server))
    assert reply == ModelReply(
        text="The answer",
        finish_reason="length",
        reasoning="Let me think. Done thinking.",
        usage=Usage(prompt=120, completion=30, cached=64),
    )
    assert reply.cut, "a reply cut by the output cap is visible as such"


async def test_a_content_filter_stop_is_raised_not_answered(server: ScriptServer) -> None:
    server.script(
        Reply(chunks=[delta({"content": "Sure, here is"}), delta({}, finish="content_filter"), DONE])
    )
    with pytest.raises(ModelError, match="content filter") as info:
        await run(make_model(server))
    assert (info.value.kind, info.value.retryable) == ("refused", False)


async def test_a_refusal_is_raised_not_answered(server: ScriptServer) -> None:
    server.script(
        Reply(
            chunks=[
                delta({"refusal": "I can't "}),
                delta({"refusal": "help with that."}),
                delta({}, "stop"),
                DONE,
            ]
        )
    )
    with pytest.raises(ModelError, match=r"refused to answer: I can't help with that\.") as info:
        await run(make_model(server))
    assert info.value.kind == "refused"
