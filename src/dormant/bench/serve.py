"""``dormant bench serve``: load on ``dormant serve`` over loopback, bounded in count and time.

A server runs in a subprocess (SQLite store, echo agent, one tenant). The benchmark
opens ``clients`` SSE streams, one per thread, then ``posters`` closed-loop clients
post inputs to those threads as fast as the server answers (the highest steady rate
for that concurrency) for ``seconds``. Each input's content is its send time, so
every stream measures the event delivery lag of the user message it carries
(admission → slice → commit → event on the wire) and of the agent's reply.

Figures: admissions/s, p50/p99 admit latency (202 answer), 429s, event delivery lag
p50/p99, and the server's RSS before the streams, with them open, and at the end —
set against ``stream_queue_bytes * clients``, the bound on live text the streams may
hold. Writes ``OUT/summary.json``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import psutil

from ..server.app import ServerConfig


@dataclass
class Params:
    """What one run does (each bounded)."""

    clients: int = 1000
    posters: int = 32
    seconds: float = 20.0
    connect_timeout_s: float = 60.0
    concurrency: int = 64
    #: ``sqlite`` (a file in a temporary directory) or ``memory`` (the in-RAM baseline)
    store: str = "sqlite"


@dataclass
class Figures:
    """What one run measured."""

    clients: int
    clients_connected: int = 0
    admissions: int = 0
    overloaded_429: int = 0
    errors: int = 0
    admissions_per_s: float = 0.0
    admit_p50_ms: float = 0.0
    admit_p99_ms: float = 0.0
    events: int = 0
    user_lag_p50_ms: float = 0.0
    user_lag_p99_ms: float = 0.0
    reply_lag_p50_ms: float = 0.0
    reply_lag_p99_ms: float = 0.0
    streams_dropped: int = 0
    rss_idle_bytes: int = 0
    rss_connected_bytes: int = 0
    rss_end_bytes: int = 0
    rss_per_connection_bytes: float = 0.0
    #: CPU seconds used while posting, by the server and by this (client) process: on a
    #: shared machine this says which side was the bottleneck
    server_cpu_s: float = 0.0
    client_cpu_s: float = 0.0
    posting_s: float = 0.0
    server_cpu_ms_per_admission: float = 0.0
    stream_queue_bytes: int = ServerConfig.stream_queue_bytes
    queue_cap_total_bytes: int = 0
    notes: list[str] = field(default_factory=list)


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values`` (0 when empty), nearest rank."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _key(proc: asyncio.subprocess.Process, timeout: float) -> str:
    """The API key the server prints on stdout at start (``--bootstrap-tenant``)."""
    assert proc.stdout is not None
    async with asyncio.timeout(timeout):
        line = await proc.stdout.readline()
    key = line.decode().strip()
    if not key.startswith("dk_"):
        raise RuntimeError(f"dormant serve printed no API key (got {key[:40]!r}); see server.log")
    return key


async def _wait_healthy(url: str, proc: asyncio.subprocess.Process, timeout: float) -> None:
    async with httpx.AsyncClient(base_url=url) as c, asyncio.timeout(timeout):
        while True:
            if proc.returncode is not None:
                raise RuntimeError(f"the server exited ({proc.returncode})")
            with contextlib.suppress(httpx.TransportError):
                if (await c.get("/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.1)


async def _stream(
    client: httpx.AsyncClient,
    thread: str,
    connected: asyncio.Event,
    stop: asyncio.Event,
    user_lag: list[float],
    reply_lag: list[float],
    fig: Figures,
) -> None:
    """One SSE client: records the delivery lag of each message carrying a send time."""
    kind = ""
    try:
        async with client.stream("GET", f"/v1/threads/{thread}/events") as r:
            fig.clients_connected += 1
            connected.set()
            async for line in r.aiter_lines():
                if stop.is_set():
                    return
                if line.startswith("event:"):
                    kind = line[6:].strip()
                    if kind == "error":
                        fig.streams_dropped += 1
                elif line.startswith("data:") and kind == "message":
                    message = json.loads(line[5:])
                    text = message["content"].removeprefix("echo: ")
                    with contextlib.suppress(ValueError):
                        lag = time.time() - float(text)
                        (user_lag if message["role"] == "user" else reply_lag).append(lag)
                        fig.events += 1
    except (httpx.TransportError, httpx.HTTPStatusError):
        connected.set()


async def _poster(
    client: httpx.AsyncClient, threads: list[str], stop: asyncio.Event, latency: list[float], fig: Figures
) -> None:
    """A closed-loop poster: one input at a time, as fast as the server answers."""
    while not stop.is_set():
        thread = random.choice(threads)
        started = time.perf_counter()
        try:
            r = await client.post(f"/v1/threads/{thread}/inputs", json={"content": repr(time.time())})
        except httpx.TransportError:
            fig.errors += 1
            continue
        if r.status_code == 202:
            latency.append(time.perf_counter() - started)
            fig.admissions += 1
        elif r.status_code == 429:
            fig.overloaded_429 += 1
            await asyncio.sleep(float(r.headers.get("Retry-After", "1")))
        else:
            fig.errors += 1


async def run(params: Params, out: Path) -> Figures:
    """One run; writes ``out/summary.json`` and returns the figures."""
    out.mkdir(parents=True, exist_ok=True)
    fig = Figures(clients=params.clients)
    fig.queue_cap_total_bytes = fig.stream_queue_bytes * params.clients
    with tempfile.TemporaryDirectory(prefix="dormant-bench-serve-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        store = "memory://" if params.store == "memory" else f"sqlite:///{tmp}/bench.db"
        cmd = [sys.executable, "-m", "dormant.cli", "serve", "--store", store]
        cmd += ["--port", str(port), "--bootstrap-tenant", "bench", "--concurrency", str(params.concurrency)]
        log = (out / "server.log").open("wb")
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, stderr=log)
        try:
            key = await _key(proc, 30)
            await _wait_healthy(url, proc, 30)
            server = psutil.Process(proc.pid)
            fig.rss_idle_bytes = server.memory_info().rss
            limits = httpx.Limits(
                max_connections=params.clients + params.posters + 8, max_keepalive_connections=None
            )
            headers = {"Authorization": f"Bearer {key}"}
            timeout = httpx.Timeout(30.0, read=None)
            async with httpx.AsyncClient(
                base_url=url, headers=headers, limits=limits, timeout=timeout
            ) as client:
                threads = [f"b{i}" for i in range(params.clients)]
                async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as setup:
                    for start in range(0, len(threads), 16):
                        batch = threads[start : start + 16]
                        await asyncio.gather(*(setup.post("/v1/threads", json={"id": t}) for t in batch))
                stop = asyncio.Event()
                user_lag: list[float] = []
                reply_lag: list[float] = []
                latency: list[float] = []
                flags = [asyncio.Event() for _ in threads]
                streams = [
                    asyncio.create_task(_stream(client, t, f, stop, user_lag, reply_lag, fig))
                    for t, f in zip(threads, flags, strict=True)
                ]
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(params.connect_timeout_s):
                        await asyncio.gather(*(f.wait() for f in flags))
                await asyncio.sleep(1.0)
                fig.rss_connected_bytes = server.memory_info().rss
                # posters get a pool of their own: httpcore scans its pool per request, so
                # sharing one with a thousand open streams would measure the client, not the server
                post_limits = httpx.Limits(
                    max_connections=params.posters, max_keepalive_connections=params.posters
                )
                poster_client = httpx.AsyncClient(
                    base_url=url, headers=headers, limits=post_limits, timeout=timeout
                )
                posters = [
                    asyncio.create_task(_poster(poster_client, threads, stop, latency, fig))
                    for _ in range(params.posters)
                ]
                started = time.perf_counter()
                server_cpu = sum(server.cpu_times()[:2])
                client_cpu = sum(psutil.Process().cpu_times()[:2])
                await asyncio.sleep(params.seconds)
                stop.set()
                await asyncio.gather(*posters, return_exceptions=True)
                await poster_client.aclose()
                elapsed = time.perf_counter() - started
                fig.posting_s = round(elapsed, 2)
                fig.server_cpu_s = round(sum(server.cpu_times()[:2]) - server_cpu, 2)
                fig.client_cpu_s = round(sum(psutil.Process().cpu_times()[:2]) - client_cpu, 2)
                await asyncio.sleep(2.0)  # events of the last admissions arrive
                fig.rss_end_bytes = server.memory_info().rss
                for task in streams:
                    task.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
            fig.admissions_per_s = round(fig.admissions / elapsed, 1)
            if fig.admissions:
                fig.server_cpu_ms_per_admission = round(fig.server_cpu_s * 1000 / fig.admissions, 2)
            fig.admit_p50_ms = round(pct(latency, 0.5) * 1000, 2)
            fig.admit_p99_ms = round(pct(latency, 0.99) * 1000, 2)
            fig.user_lag_p50_ms = round(pct(user_lag, 0.5) * 1000, 2)
            fig.user_lag_p99_ms = round(pct(user_lag, 0.99) * 1000, 2)
            fig.reply_lag_p50_ms = round(pct(reply_lag, 0.5) * 1000, 2)
            fig.reply_lag_p99_ms = round(pct(reply_lag, 0.99) * 1000, 2)
            if fig.clients_connected:
                extra = fig.rss_connected_bytes - fig.rss_idle_bytes
                fig.rss_per_connection_bytes = round(extra / fig.clients_connected, 1)
        finally:
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            log.close()
    (out / "summary.json").write_text(json.dumps(asdict(fig), indent=2))
    return fig
