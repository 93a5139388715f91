"""Connection guards: a client dribbling its headers or body is cut off after the read
timeout while normal clients are served at once; heads over the caps are refused."""

from __future__ import annotations

import asyncio
import json
import time
from urllib.parse import urlsplit

from dormant.agent import Agent
from dormant.models import echo_model
from dormant.server import ServerConfig
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]
TIMEOUT_S = 1.0


def config(**overrides: object) -> ServerConfig:
    options: dict[str, object] = {
        "poll_s": 0.2,
        "heartbeat_s": 1.0,
        "header_timeout_s": TIMEOUT_S,
        "body_timeout_s": TIMEOUT_S,
    }
    options.update(overrides)
    return ServerConfig(**options)  # type: ignore[arg-type]


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def dribble(writer: asyncio.StreamWriter, data: bytes, every_s: float, stop: asyncio.Event) -> None:
    """Send ``data`` a byte at a time (bounded: ``len(data)`` writes), until refused."""
    for byte in data:
        if stop.is_set() or writer.is_closing():
            return
        try:
            writer.write(bytes([byte]))
            await writer.drain()
        except (ConnectionError, OSError):
            return
        await asyncio.sleep(every_s)


async def slow_client(url: str, data: bytes) -> tuple[float, bytes]:
    """Seconds until the server closed a connection dribbling ``data``, and what it answered."""
    reader, writer = await connect(url)
    stop = asyncio.Event()
    started = time.perf_counter()
    sender = asyncio.create_task(dribble(writer, data, 0.05, stop))
    try:
        async with asyncio.timeout(10 * TIMEOUT_S):
            answer = await reader.read()  # until the server closes
        return time.perf_counter() - started, answer
    finally:
        stop.set()
        await sender
        writer.close()


async def test_a_client_dribbling_its_headers_is_cut_off_and_others_are_not_delayed() -> None:
    head = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 400 + b"\r\n\r\n"  # ~23 s at 20 B/s
    async with serve(AGENTS, config=config()) as s, s.client() as c:
        slow = [asyncio.create_task(slow_client(s.url, head)) for _ in range(5)]
        latencies = []
        for _ in range(10):  # while the slow ones dribble: answered at once
            started = time.perf_counter()
            assert (await c.get("/v1/threads")).status_code == 200
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(0.05)
        results = await asyncio.gather(*slow)
        metrics = (await c.get("/metrics")).text
    for seconds, answer in results:
        assert TIMEOUT_S - 0.05 <= seconds < TIMEOUT_S + 1.0, seconds
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        body = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "request_timeout"
    assert max(latencies) < 0.25, latencies
    assert 'dormant_http_connections_refused_total{reason="header_timeout"} 5.0' in metrics


async def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout() -> None:
    async with serve(AGENTS, config=config()) as s:
        seconds, answer = await slow_client(s.url, b"")
    assert TIMEOUT_S - 0.05 <= seconds < TIMEOUT_S + 1.0
    assert answer.startswith(b"HTTP/1.1 408 ")


async def test_a_client_dribbling_its_body_is_cut_off() -> None:
    body = json.dumps({"content": "x" * 200}).encode()
    head = (
        b"POST /v1/threads/t/inputs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n"
    )
    async with serve(AGENTS, config=config()) as s:
        request = head + f"Authorization: Bearer {s.key_a}\r\n\r\n".encode()
        reader, writer = await connect(s.url)
        writer.write(request)  # the head at once, then the body a byte at a time
        await writer.drain()
        stop = asyncio.Event()
        started = time.perf_counter()
        sender = asyncio.create_task(dribble(writer, body, 0.05, stop))
        try:
            async with asyncio.timeout(10 * TIMEOUT_S):
                answer = await reader.read()
            seconds = time.perf_counter() - started
        finally:
            stop.set()
            await sender
            writer.close()
        async with s.client() as c:  # nothing was admitted
            assert (await c.get("/v1/threads/t")).status_code == 404
    assert TIMEOUT_S - 0.05 <= seconds < TIMEOUT_S + 1.0, seconds
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"request body not received" in answer


async def test_a_request_sent_at_once_is_not_cut_by_the_timeouts() -> None:
    async with serve(AGENTS, config=config(header_timeout_s=0.5, body_timeout_s=0.5)) as s, s.client() as c:
        for i in range(3):  # on one kept-alive connection, spanning more than the timeouts
            r = await c.post(f"/v1/threads/k{i}/inputs", json={"content": "x" * 50_000})
            assert r.status_code == 202
            await asyncio.sleep(0.7)  # idle past both timeouts: no timer of the last request fires
        metrics = (await c.get("/metrics")).text
    assert "dormant_http_connections_refused_total{" not in metrics


async def test_heads_over_the_caps_are_refused_with_431() -> None:
    async with serve(AGENTS, config=config(max_header_bytes=4096, max_headers=20)) as s, s.client() as c:
        big = await c.get("/healthz", headers={"X-Big": "a" * 5000})
        assert big.status_code == 431 and big.json()["error"]["code"] == "headers_too_large"
        many = await c.get("/healthz", headers={f"X-H{i}": "v" for i in range(25)})
        assert many.status_code == 431 and "more than 20 request headers" in many.json()["error"]["message"]
        long_url = await c.get("/healthz?" + "q" * 5000)
        assert long_url.status_code == 431
        assert (await c.get("/healthz", headers={"X-Fine": "a" * 1000})).status_code == 200
        # a head over the cap that never ends is cut as it arrives, not buffered
        reader, writer = await connect(s.url)
        writer.write(b"GET /healthz HTTP/1.1\r\nX-Endless: " + b"a" * 8192)
        await writer.drain()
        async with asyncio.timeout(5):
            answer = await reader.read()
        writer.close()
        assert answer.startswith(b"HTTP/1.1 431 ")
