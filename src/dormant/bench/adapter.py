"""Hand-written httpx adapter against the official ``openai`` SDK, on this workload.

``python -m dormant.bench.adapter [--chunks N] [--repeat R]`` prints three things:

* import RSS: a fresh interpreter's RSS growth from importing each client and
  building one client object;
* CPU per streamed chunk: the client process's CPU time to read a reply of N
  SSE chunks from a loopback server running in another process, divided by N;
* behaviour on faults: 429 then success, 500 then success, a stall past the
  timeout then success, a stream cut mid-reply, a malformed chunk, and a stream
  that ends without ``[DONE]`` or a finish reason (what each client returns or raises).

The SDK is a development dependency (``pip install -e .[dev]``); the adapter needs
nothing more than the package.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from ..errors import ModelError
from ..models.base import ModelRequest, collect
from ..models.breaker import CircuitBreaker
from ..models.openai import OpenAIChatModel
from ..records import Message

_IMPORT_PROBE = """
import gc, os, sys
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
gc.collect(); before = rss()
{body}
gc.collect(); print(rss() - before)
"""
_IMPORTS = {
    "dormant.models.base (either adapter needs it)": "import dormant.models.base",
    "adapter (dormant.models.openai + httpx)": (
        "from dormant.models.openai import OpenAIChatModel\n"
        "m = OpenAIChatModel(model='m', base_url='http://127.0.0.1:9/v1')\n"
        "m._http()"
    ),
    "openai SDK (AsyncOpenAI)": (
        "import openai\nc = openai.AsyncOpenAI(base_url='http://127.0.0.1:9/v1', api_key='x')"
    ),
    "dormant.models.base + openai SDK": (
        "import dormant.models.base, openai\n"
        "c = openai.AsyncOpenAI(base_url='http://127.0.0.1:9/v1', api_key='x')"
    ),
}


def import_rss() -> dict[str, int]:
    """Bytes of RSS each client adds to a bare interpreter (median of 3 fresh processes)."""
    out: dict[str, int] = {}
    for name, body in _IMPORTS.items():
        runs = sorted(
            int(
                subprocess.run(
                    [sys.executable, "-c", _IMPORT_PROBE.format(body=body)],
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=120,
                ).stdout.strip()
            )
            for _ in range(3)
        )
        out[name] = runs[1]
    return out


# --------------------------------------------------------------------------- the server process


def _chunk(content: str | None = None, finish: str | None = None) -> bytes:
    delta = {} if content is None else {"content": content}
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _bodies(chunks: int) -> dict[str, tuple[int, bytes, float]]:
    """Per path: (status, body, delay before answering)."""
    words = b"".join(_chunk(f"w{n} ") for n in range(chunks))
    done = b"data: [DONE]\n\n"
    return {
        "/big": (200, words + _chunk(finish="stop") + done, 0.0),
        "/ok": (200, _chunk("fine") + _chunk(finish="stop") + done, 0.0),
        "/429": (429, b'{"error": {"message": "slow down"}}', 0.0),
        "/500": (500, b'{"error": {"message": "boom"}}', 0.0),
        "/stall": (200, _chunk("late") + done, 3.0),
        "/cut": (200, _chunk("half a te"), 0.0),  # then the socket closes: no [DONE], no finish
        "/malformed": (200, _chunk("a") + b'data: {"choices": [\n\n' + done, 0.0),
    }


def _serve(sock: socket.socket, chunks: int) -> None:
    """A tiny HTTP/1.0-style server: each path answers one scripted way; scenario
    paths (``/s/<a>,<b>,...``) answer with their n-th part on the n-th request."""
    bodies = _bodies(chunks)
    counters: dict[str, int] = {}
    while True:
        conn, _ = sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                piece = conn.recv(65536)
                if not piece:
                    break
                data += piece
            head, _, rest = data.partition(b"\r\n\r\n")
            lines = head.decode().split("\r\n")
            path = lines[0].split(" ")[1].split("/chat/completions")[0]
            length = next((int(x.split(":")[1]) for x in lines if x.lower().startswith("content-length")), 0)
            while len(rest) < length:
                rest += conn.recv(65536)
            if path.startswith("/s/"):
                parts = path[3:].split(",")
                n = counters.get(path, 0)
                counters[path] = n + 1
                path = "/" + parts[min(n, len(parts) - 1)]
            status, body, delay = bodies.get(path, (404, b"{}", 0.0))
            if delay:
                time.sleep(delay)
            kind = "text/event-stream" if status == 200 else "application/json"
            header = f"HTTP/1.1 {status} X\r\nContent-Type: {kind}\r\nConnection: close\r\n"
            if status == 429:
                header += "Retry-After: 0\r\n"
            with contextlib.suppress(OSError):  # a client that gave up
                conn.sendall(header.encode() + b"\r\n" + body)


def start_server(chunks: int) -> tuple[Any, int]:
    """The loopback server in its own process; ``(process, port)``."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    process = multiprocessing.get_context("fork").Process(target=_serve, args=(sock, chunks), daemon=True)
    process.start()
    sock.close()
    return process, port


# --------------------------------------------------------------------------- the two clients


def _request() -> ModelRequest:
    return ModelRequest(thread_id="b", system="", messages=(Message(seq=1, role="user", content="go"),))


async def adapter_text(base: str, *, timeout: float = 1.0) -> str:
    model = OpenAIChatModel(
        model="m",
        base_url=base,
        max_retries=2,
        backoff=0.01,
        timeout=timeout,
        breaker=CircuitBreaker(base, threshold=100),
    )
    try:
        return (await collect(model.stream(_request()))).text
    finally:
        await model.aclose()


async def sdk_text(base: str, *, timeout: float = 1.0) -> str:
    import openai

    client = openai.AsyncOpenAI(base_url=base, api_key="x", max_retries=2, timeout=timeout)
    try:
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "go"}], stream=True
        )
        parts = []
        async for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
        return "".join(parts)
    finally:
        await client.close()


Client = Callable[..., Any]
CLIENTS: dict[str, Client] = {"adapter": adapter_text, "openai SDK": sdk_text}


def cpu_per_chunk(port: int, chunks: int, repeat: int) -> dict[str, float]:
    """Microseconds of client CPU per streamed chunk (best of ``repeat``)."""
    out: dict[str, float] = {}
    for name, client in CLIENTS.items():
        best = float("inf")
        for _ in range(repeat):
            started = time.process_time()
            text = asyncio.run(client(f"http://127.0.0.1:{port}/big", timeout=60.0))
            best = min(best, time.process_time() - started)
            assert text.count(" ") == chunks, f"{name} lost chunks"
        out[name] = best / chunks * 1e6
    return out


FAULTS = {
    "429 then ok": "s/429,ok",
    "500 then ok": "s/500,ok",
    "stall past the timeout, then ok": "s/stall,ok",
    "stream cut mid-reply": "cut",
    "malformed chunk": "malformed",
}


def fault_behaviour(port: int) -> dict[str, dict[str, str]]:
    """What each client returns (``text: ...``) or raises, per fault."""
    out: dict[str, dict[str, str]] = {}
    for fault, path in FAULTS.items():
        row: dict[str, str] = {}
        for name, client in CLIENTS.items():
            try:
                text = asyncio.run(client(f"http://127.0.0.1:{port}/{path}"))
                row[name] = f"returned {text!r}"
            except ModelError as exc:
                row[name] = f"ModelError(retryable={exc.retryable}, kind={exc.kind})"
            except Exception as exc:
                row[name] = f"raised {type(exc).__name__}"
        out[fault] = row
    return out


def main(argv: list[str] | None = None) -> None:
    """Run the three measurements and print them as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    process, port = start_server(args.chunks)
    try:
        report = {
            "import_rss_bytes": import_rss(),
            "cpu_us_per_chunk": cpu_per_chunk(port, args.chunks, args.repeat),
            "faults": fault_behaviour(port),
        }
    finally:
        process.kill()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
