"""A small stand-in for llama.cpp's server, for CLI tests that need no real model: it
answers ``GET /props`` (context size, tool support), ``GET /v1/models``, ``POST /tokenize``
and ``POST /v1/chat/completions`` (a streamed reply, or a hang of ``hang_s`` seconds)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

import pytest


class FakeLlama(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, *, n_ctx: int = 2048, supports_tools: bool = False) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.n_ctx = n_ctx
        self.supports_tools = supports_tools
        self.hang_s = 0.0
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-reply


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        server = cast(FakeLlama, self.server)
        if self.path == "/props":
            self._json(
                200,
                {
                    "default_generation_settings": {"n_ctx": server.n_ctx},
                    "chat_template_caps": {"supports_tools": server.supports_tools},
                },
            )
        elif self.path in ("/v1/models", "/health"):
            self._json(200, {"data": [{"id": "fake", "object": "model"}]})
        else:
            self._json(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        server = cast(FakeLlama, self.server)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        if self.path == "/tokenize":
            self._json(200, {"tokens": list(range(len(str(body.get("content", "")).split())))})
            return
        with server.lock:
            server.bodies.append(body)
        if server.hang_s:
            time.sleep(server.hang_s)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        for delta, finish in (({"role": "assistant", "content": "fake reply"}, None), ({}, "stop")):
            chunk = {
                "id": "c1",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")
        self.close_connection = True


@pytest.fixture
def fake_llama() -> Iterator[FakeLlama]:
    server = FakeLlama()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
