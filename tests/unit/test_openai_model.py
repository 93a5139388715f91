"""OpenAIChatModel against a real HTTP server on a local socket.

The server is a stdlib ``ThreadingHTTPServer`` in a daemon thread; each test
scripts its responses (status, headers, SSE body chunks) and inspects the
requests it received.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import httpx
import pytest

from dormant.errors import ModelError
from dormant.models.base import ModelReply, ModelRequest, TextDelta, ToolCallDelta, collect
from dormant.models.openai import SUMMARY_PREFIX, OpenAIChatModel
from dormant.records import Message, ToolCall

# --------------------------------------------------------------------------- server


@dataclass
class Reply:
    """One scripted response."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[bytes] = field(default_factory=list)
    delay: float = 0.0  # seconds before the status line is sent
    chunked: bool = False  # HTTP/1.1 chunked framing (else: body ends when the socket closes)
    cut: bool = False  # with chunked: close the socket without the terminating chunk


@dataclass
class Received:
    """One request the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    at: float


class ScriptServer(ThreadingHTTPServer):
    """An HTTP server that answers each POST with the next scripted :class:`Reply`."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def script(self, *replies: Reply) -> None:
        with self.lock:
            self.replies.extend(replies)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that gave up (timeout test) makes writes fail; that is expected


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        server = cast(ScriptServer, self.server)
        length = int(self.headers.get("Content-Length", "0"))
        raw = self.rfile.read(length)
        with server.lock:
            server.received.append(
                Received(
                    path=self.path,
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=json.loads(raw),
                    at=time.monotonic(),
                )
            )
            reply = server.replies.popleft() if server.replies else Reply(status=599)
        if reply.delay:
            time.sleep(reply.delay)
        self.close_connection = True
        if reply.chunked:
            self.protocol_version = "HTTP/1.1"
        self.send_response(reply.status)
        headers = {"Content-Type": "text/event-stream", **reply.headers}
        if reply.chunked:
            headers["Transfer-Encoding"] = "chunked"
        headers["Connection"] = "close"
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        for chunk in reply.chunks:
            if reply.chunked:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            else:
                self.wfile.write(chunk)
            self.wfile.flush()
        if reply.chunked and not reply.cut:
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    srv = ScriptServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


# --------------------------------------------------------------------------- helpers


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


def delta(delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


def text_reply(*pieces: str) -> Reply:
    chunks = [delta({"role": "assistant", "content": ""})]
    chunks += [delta({"content": piece}) for piece in pieces]
    chunks += [delta({}, finish="stop"), DONE]
    return Reply(chunks=chunks)


def make_request(
    *messages: Message, system: str = "", tools: tuple[dict[str, Any], ...] = ()
) -> ModelRequest:
    if not messages:
        messages = (Message(seq=1, role="user", content="hi"),)
    return ModelRequest(thread_id="t1", system=system, messages=messages, tools=tools)


def make_model(server: ScriptServer, **kwargs: Any) -> OpenAIChatModel:
    options: dict[str, Any] = {"model": "test-model", "base_url": server.base_url, "backoff": 0.01}
    options.update(kwargs)
    return OpenAIChatModel(**options)


async def run(model: OpenAIChatModel, request: ModelRequest | None = None) -> ModelReply:
    try:
        return await collect(model.stream(request or make_request()))
    finally:
        await model.aclose()


@pytest.fixture(autouse=True)
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DORMANT_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


# --------------------------------------------------------------------------- streaming


async def test_streams_text(server: ScriptServer) -> None:
    server.script(text_reply("Hel", "lo", " world"))
    model = make_model(server)
    events = [event async for event in model.stream(make_request())]
    await model.aclose()
    assert events == [TextDelta(text="Hel"), TextDelta(text="lo"), TextDelta(text=" world")]
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
    ]
    reply = await run(model)
    assert reply == ModelReply(
        text="",
        tool_calls=(ToolCall(id="call_1", name="weather", arguments='{"city": "Paris"}'),),
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
    assert reply == ModelReply(text="whole", tool_calls=(ToolCall(id="c1", name="f", arguments="{}"),))


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


async def test_timeout_is_retried(server: ScriptServer) -> None:
    server.script(Reply(delay=1.0, chunks=[DONE]), text_reply("fast"))
    reply = await run(make_model(server, timeout=0.2))
    assert reply.text == "fast"
    assert len(server.received) == 2


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


def test_a_compaction_summary_follows_the_system_prompt() -> None:
    model = OpenAIChatModel(model="test-model", base_url="http://127.0.0.1:9/v1")
    request = ModelRequest(
        thread_id="t",
        system="You are terse.",
        summary="The user wants Paris weather.",
        messages=(Message(seq=9, role="user", content="And tomorrow?"),),
    )
    assert model.request_body(request)["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": SUMMARY_PREFIX + "The user wants Paris weather."},
        {"role": "user", "content": "And tomorrow?"},
    ]
