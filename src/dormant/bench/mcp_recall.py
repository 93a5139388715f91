"""``dormant bench mcp-recall``: one recall through ``/mcp`` against the same recall
through the REST API, on one live loopback ``dormant serve``.

A server (SQLite store in a temporary directory, one tenant, ``memories`` memories of one
subject, the hashing embedder so that no model load dominates) runs in this process on
a free 127.0.0.1 port. Then ``calls`` recalls, one at a time, each way: ``POST
/v1/memory/recall`` with httpx, and the ``recall`` tool with the official MCP client over
streamable HTTP (one client, stateless server: each call is one POST). Reported per
way: latency p50/p99 (ms) and the process's CPU per call (client and server share the
process, so both are in it). Writes ``OUT/summary.json``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import psutil
import uvicorn

from ..agent import Agent
from ..config import Settings
from ..memory.embedder import HashingEmbedder
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..runtime import Runtime
from ..server.app import ServerConfig, create_app
from ..server.main import listen, uvicorn_config

IDENTITY = {"phone": "+1 555-0100"}


def _echo(request: ModelRequest) -> ModelReply:
    return ModelReply(text="ok")


async def _timed(calls: int, once: Callable[[int], Awaitable[None]]) -> dict[str, float]:
    proc = psutil.Process()
    for i in range(min(20, calls)):  # warm-up: connections, caches
        await once(i)
    cpu0, lat = proc.cpu_times(), []
    for i in range(calls):
        started = time.perf_counter()
        await once(i)
        lat.append((time.perf_counter() - started) * 1000)
    cpu1 = proc.cpu_times()
    cpu = (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)
    cuts = statistics.quantiles(lat, n=100)
    return {"p50_ms": statistics.median(lat), "p99_ms": cuts[98], "cpu_ms_per_call": cpu * 1000 / calls}


async def run_mcp_recall_bench(calls: int, memories: int, out: Path) -> dict[str, dict[str, float]]:
    """Run both ways; answers ``{"rest": figures, "mcp": figures}`` (also written to OUT)."""
    import httpx2
    from mcp.client import Client
    from mcp.client.streamable_http import streamable_http_client

    with tempfile.TemporaryDirectory() as tmp:
        store = f"sqlite:///{tmp}/dormant.db"
        settings = Settings.build(store=store)
        agent = Agent(name="assistant", model=ScriptedModel(_echo))
        runtime = Runtime(store, [agent], settings=settings, memory_embedder=HashingEmbedder(384))
        await runtime.open()
        tenant = await runtime.store.create_tenant("bench")
        _, key = await runtime.store.create_key(tenant.id)
        memory = await runtime.memory.for_tenant(tenant.id)
        subject = await memory.bind(IDENTITY)
        for i in range(memories):
            await memory.add(subject, f"memory {i}: likes topic {i % 17} and colour {i % 5}")
        app = create_app(runtime, ServerConfig())
        sock = listen("127.0.0.1", 0)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn_config(app, app.state.server.config, graceful_s=2))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
            headers = {"Authorization": f"Bearer {key}"}
            body = {"query": "topic 3 colour", "identity": IDENTITY, "k": 5}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as rest:

                async def over_rest(i: int) -> None:
                    r = await rest.post("/v1/memory/recall", json=body)
                    assert r.status_code == 200 and r.json()["items"], r.text

                figures = {"rest": await _timed(calls, over_rest)}
            http = httpx2.AsyncClient(headers=headers, timeout=30)
            async with Client(streamable_http_client(url + "/mcp", http_client=http)) as client:

                async def over_mcp(i: int) -> None:
                    result = await client.call_tool("recall", body)
                    assert not result.is_error and result.structured_content, result.content

                figures["mcp"] = await _timed(calls, over_mcp)
        finally:
            server.should_exit = True
            await task
            sock.close()
    out.mkdir(parents=True, exist_ok=True)
    summary = {"calls": calls, "memories": memories, **figures}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return figures
