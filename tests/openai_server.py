"""A scriptable OpenAI-compatible server on loopback, for the model adapter tests.

The server is a stdlib ``ThreadingHTTPServer`` in a daemon thread; each test
scripts its responses (status, headers, SSE body chunks) and inspects the
requests it received.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest

from dormant.models import breaker
from dormant.models.base import ModelReply, ModelRequest, collect
from dormant.models.openai import OpenAIChatModel
from dormant.records import Message

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


@pytest.fixture(autouse=True)
def fresh_breakers() -> Iterator[None]:
    """Each test starts with closed circuit breakers (they are per process)."""
    breaker.reset()
    yield
    breaker.reset()
