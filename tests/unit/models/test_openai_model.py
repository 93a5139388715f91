"""OpenAIChatModel against a real HTTP server on a local socket (:mod:`tests.openai_server`)."""

from __future__ import annotations

import json
import socket
import time

import httpx
import pytest

from dormant.errors import ModelError
from dormant.models.base import Finish, ModelReply, ModelRequest, TextDelta, ToolCallDelta, collect
from dormant.models.openai import SUMMARY_PREFIX, OpenAIChatModel
from dormant.records import Message, ToolCall
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

# --------------------------------------------------------------------------- streaming


async def test_streams_text(server: ScriptServer) -> None:
    server.script(text_reply("Hel", "lo", " world"))
    model = make_model(server)
    events = [event async for event in model.stream(make_request())]
    await model.aclose()
    assert events == [
        TextDelta(text="Hel"),
        TextDelta(text="lo"),
        TextDelta(text=" world"),
        Finish(reason="stop"),
    ]
    assert len(server.received) == 1
    received = server.received[0]
    assert received.path == "/v1/chat/completions"
    assert received.body["model"] == "test-model"
    assert received.body["stream"] is True
    assert "authorization" not in received.headers
    assert model.name == "test-model"
    assert model.context_window == 128_000


def split_tool_call_reply() -> Reply:
    first = {"index": 0, "id": "call_1", "type": "function"}
    return Reply(
        chunks=[
            delta({"role": "assistant", "content": None}),
            delta({"tool_calls": [{**first, "function": {"name": "weather", "arguments": ""}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": '}}]}),
            delta({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            delta({}, finish="tool_calls"),
            DONE,
        ]
    )


async def test_streamed_tool_call_split_across_chunks(server: ScriptServer) -> None:
    server.script(split_tool_call_reply(), split_tool_call_reply())
    model = make_model(server)
    events = [event async for event in model.stream(make_request())]
    assert events == [
        ToolCallDelta(index=0, id="call_1", name="weather", arguments=""),
        ToolCallDelta(index=0, arguments='{"ci'),
        ToolCallDelta(index=0, arguments='ty": '),
        ToolCallDelta(index=0, arguments='"Paris"}'),
        Finish(reason="tool_calls"),
    ]
    reply = await run(model)
    assert reply == ModelReply(
        text="",
        tool_calls=(ToolCall(id="call_1", name="weather", arguments='{"city": "Paris"}'),),
        finish_reason="tool_calls",
    )


async def test_collect_text_and_two_tool_calls(server: ScriptServer) -> None:
    server.script(
        Reply(
            chunks=[
                delta({"content": "On it."}),
                delta({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f"}}]}),
                delta({"tool_calls": [{"index": 1, "id": "b", "function": {"name": "g"}}]}),
                delta({"tool_calls": [{"index": 0, "function": {"arguments": '{"x": 1}'}}]}),
                delta({"tool_calls": [{"index": 1, "function": {"arguments": '{"y": 2}'}}]}),
                DONE,
            ]
        )
    )
    reply = await run(make_model(server))
    assert reply.text == "On it."
    assert reply.tool_calls == (
        ToolCall(id="a", name="f", arguments='{"x": 1}'),
        ToolCall(id="b", name="g", arguments='{"y": 2}'),
    )


async def test_sse_comments_crlf_and_usage_chunks_are_tolerated(server: ScriptServer) -> None:
    usage = sse({"id": "x", "choices": [], "usage": {"total_tokens": 3}}).replace(b"\n", b"\r\n")
    server.script(
        Reply(
            chunks=[
                b": keep-alive\n\n",
                delta({"content": "a"}).replace(b"\n", b"\r\n"),
                b"event: message\n" + delta({"content": "b"}),
                usage,
                b"data: [DO",  # [DONE] split across socket writes
                b"NE]\n\n",
            ]
        )
    )
    reply = await run(make_model(server))
    assert reply.text == "ab"


async def test_non_streamed_json_reply_is_accepted(server: ScriptServer) -> None:
    body = {
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "whole",
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ]
    }
    server.script(Reply(headers={"Content-Type": "application/json"}, chunks=[json.dumps(body).encode()]))
    reply = await run(make_model(server))
    assert reply == ModelReply(
        text="whole", tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),), finish_reason="tool_calls"
    )


# --------------------------------------------------------------------------- request body


async def test_request_body_conversion(server: ScriptServer) -> None:
    tools = (
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
    )
    messages = (
        Message(seq=1, role="user", content="Weather in Paris?"),
        Message(
            seq=2,
            role="assistant",
            content="",
            tool_calls=(ToolCall(id="call_1", name="weather", arguments='{"city": "Paris"}'),),
        ),
        Message(seq=3, role="tool", content="sunny", tool_call_id="call_1", name="weather"),
        Message(seq=4, role="assistant", content="It is sunny."),
        Message(seq=5, role="user", content="Thanks"),
    )
    server.script(text_reply("ok"))
    model = make_model(server, api_key="sk-test", temperature=0.25)
    await run(model, make_request(*messages, system="You are terse.", tools=tools))

    received = server.received[0]
    assert received.headers["authorization"] == "Bearer sk-test"
    assert received.headers["content-type"] == "application/json"
    assert received.body == {
        "model": "test-model",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 4096,
        "temperature": 0.25,
        "tools": [tools[0]],
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "Thanks"},
        ],
    }


async def test_no_system_and_no_tools_are_omitted(server: ScriptServer) -> None:
    server.script(text_reply("ok"))
    await run(make_model(server))
    body = server.received[0].body
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert "tools" not in body
    assert "temperature" not in body


async def test_api_key_from_dormant_env(server: ScriptServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DORMANT_API_KEY", "sk-dormant")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    server.script(text_reply("ok"))
    await run(make_model(server))
    assert server.received[0].headers["authorization"] == "Bearer sk-dormant"


async def test_api_key_from_openai_env(server: ScriptServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    server.script(text_reply("ok"))
    model = make_model(server)
    assert "sk-openai" not in repr(model)
    await run(model)
    assert server.received[0].headers["authorization"] == "Bearer sk-openai"


# --------------------------------------------------------------------------- retries


async def test_429_with_retry_after_then_success(server: ScriptServer) -> None:
    server.script(
        Reply(
            status=429,
            headers={"Retry-After": "0.2", "Content-Type": "application/json"},
            chunks=[b'{"error": {"message": "slow down"}}'],
        ),
        text_reply("done"),
    )
    reply = await run(make_model(server, backoff=0.001))
    assert reply.text == "done"
    assert len(server.received) == 2
    assert server.received[1].at - server.received[0].at >= 0.2
    assert server.received[0].body == server.received[1].body


async def test_500_twice_then_success(server: ScriptServer) -> None:
    server.script(
        Reply(status=500, chunks=[b"internal error"]),
        Reply(status=502, chunks=[b"bad gateway"]),
        text_reply("finally"),
    )
    reply = await run(make_model(server))
    assert reply.text == "finally"
    assert len(server.received) == 3


async def test_400_is_not_retried(server: ScriptServer) -> None:
    error = {"error": {"message": "context length exceeded", "type": "invalid_request_error"}}
    server.script(
        Reply(
            status=400,
            headers={"Content-Type": "application/json"},
            chunks=[json.dumps(error).encode()],
        ),
        text_reply("never"),
    )
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    assert info.value.retryable is False
    assert "context length exceeded" in str(info.value)
    assert "400" in str(info.value)
    assert len(server.received) == 1


async def test_401_plain_text_message(server: ScriptServer) -> None:
    server.script(Reply(status=401, headers={"Content-Type": "text/plain"}, chunks=[b"bad key"]))
    with pytest.raises(ModelError, match="bad key") as info:
        await run(make_model(server))
    assert info.value.retryable is False


async def test_retries_exhausted(server: ScriptServer) -> None:
    server.script(*[Reply(status=503, chunks=[b"overloaded"]) for _ in range(3)])
    with pytest.raises(ModelError) as info:
        await run(make_model(server, max_retries=2))
    assert info.value.retryable is True
    assert info.value.retry_after is not None
    assert "overloaded" in str(info.value)
    assert len(server.received) == 3


async def test_retries_exhausted_reports_retry_after(server: ScriptServer) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "0.05"}, chunks=[b"{}"]))
    with pytest.raises(ModelError) as info:
        await run(make_model(server, max_retries=0))
    assert info.value.retryable is True
    assert info.value.retry_after == pytest.approx(0.05)
    assert len(server.received) == 1


async def test_long_retry_after_is_handed_to_the_caller(server: ScriptServer) -> None:
    server.script(Reply(status=429, headers={"Retry-After": "120"}, chunks=[b"{}"]))
    started = time.monotonic()
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    assert time.monotonic() - started < 2.0
    assert info.value.retryable is True
    assert info.value.retry_after == 120.0
    assert len(server.received) == 1


async def test_connection_refused_is_retried_then_wrapped() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    model = OpenAIChatModel(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, backoff=0.01)
    with pytest.raises(ModelError) as info:
        await run(model)
    assert info.value.retryable is True
    assert isinstance(info.value.__cause__, httpx.ConnectError)


async def test_read_timeout_is_retried(server: ScriptServer) -> None:
    server.script(Reply(delay=1.0, chunks=[DONE]), text_reply("fast"))
    reply = await run(make_model(server, timeout=0.2, read_timeout=0.2))
    assert reply.text == "fast"
    assert len(server.received) == 2


async def test_timeout_alone_does_not_bound_a_slow_first_byte(server: ScriptServer) -> None:
    # a long prompt on a CPU: the server answers late; the slice's deadlines govern, not the adapter's
    server.script(Reply(delay=0.6, chunks=text_reply("slow but whole").chunks))
    reply = await run(make_model(server, timeout=0.2, max_retries=0))
    assert reply.text == "slow but whole"
    assert len(server.received) == 1


# --------------------------------------------------------------------------- broken streams


async def test_stream_cut_after_events_raises_without_retry(server: ScriptServer) -> None:
    server.script(
        Reply(chunks=[delta({"content": "partial "}), delta({"content": "answ"})]),
        text_reply("never"),
    )
    model = make_model(server)
    seen: list[str] = []
    with pytest.raises(ModelError) as info:
        async for event in model.stream(make_request()):
            assert isinstance(event, TextDelta)
            seen.append(event.text)
    await model.aclose()
    assert seen == ["partial ", "answ"]
    assert info.value.retryable is True
    assert len(server.received) == 1


async def test_chunked_stream_cut_raises_model_error(server: ScriptServer) -> None:
    server.script(
        Reply(chunked=True, cut=True, chunks=[delta({"content": "par"})]),
        text_reply("never"),
    )
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    assert info.value.retryable is True
    assert not isinstance(info.value, httpx.HTTPError)
    assert len(server.received) == 1


async def test_complete_chunked_stream(server: ScriptServer) -> None:
    reply = text_reply("chunked ", "ok")
    reply.chunked = True
    server.script(reply)
    assert (await run(make_model(server))).text == "chunked ok"


async def test_stream_cut_before_any_event_is_retried(server: ScriptServer) -> None:
    server.script(Reply(chunks=[delta({"role": "assistant", "content": ""})]), text_reply("second"))
    reply = await run(make_model(server))
    assert reply.text == "second"
    assert len(server.received) == 2


async def test_stream_without_done_but_finished_is_accepted(server: ScriptServer) -> None:
    server.script(Reply(chunks=[delta({"content": "x"}), delta({}, finish="stop")]))
    assert (await run(make_model(server))).text == "x"


async def test_malformed_json_chunk(server: ScriptServer) -> None:
    server.script(Reply(chunks=[delta({"content": "ok"}), b'data: {"choices": [\n\n', DONE]))
    with pytest.raises(ModelError, match="malformed JSON"):
        await run(make_model(server))
    assert len(server.received) == 1


async def test_error_event_in_stream(server: ScriptServer) -> None:
    server.script(Reply(chunks=[sse({"error": {"message": "engine crashed"}}), DONE]))
    with pytest.raises(ModelError, match="engine crashed"):
        await run(make_model(server))


# --------------------------------------------------------------------------- client ownership


async def test_injected_client_is_used_and_left_open(server: ScriptServer) -> None:
    server.script(text_reply("a"), text_reply("b"))
    async with httpx.AsyncClient() as client:
        model = make_model(server, client=client)
        assert (await collect(model.stream(make_request()))).text == "a"
        await model.aclose()
        assert not client.is_closed
        assert (await collect(model.stream(make_request()))).text == "b"


async def test_own_client_is_created_lazily_and_closed(server: ScriptServer) -> None:
    server.script(text_reply("a"), text_reply("b"))
    async with make_model(server) as model:
        assert (await collect(model.stream(make_request()))).text == "a"
    # A closed model opens a fresh client on next use.
    assert (await run(model)).text == "b"


def test_a_compaction_summary_goes_inside_the_one_system_message() -> None:
    model = OpenAIChatModel(model="test-model", base_url="http://127.0.0.1:9/v1")
    request = ModelRequest(
        thread_id="t",
        system="You are terse.",
        summary="The user wants Paris weather.",
        messages=(Message(seq=9, role="user", content="And tomorrow?"),),
    )
    assert model.request_body(request)["messages"] == [
        {
            "role": "system",
            "content": "You are terse.\n\n" + SUMMARY_PREFIX + "The user wants Paris weather.",
        },
        {"role": "user", "content": "And tomorrow?"},
    ]
