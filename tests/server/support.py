"""A dormant server on a loopback port, in the test's event loop, with two tenants."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import uvicorn
from fastapi import FastAPI

from dormant.agent import Agent
from dormant.config import Settings
from dormant.runtime import Runtime
from dormant.server import ServerConfig, create_app
from dormant.server.main import listen, uvicorn_config


@dataclass
class Served:
    """A running server: its base URL, app, runtime, and an API key for each of two tenants."""

    url: str
    app: FastAPI
    runtime: Runtime
    key_a: str
    key_b: str

    def client(self, key: str | None = None, **kwargs: object) -> httpx.AsyncClient:
        """An HTTP client of the server, authenticated with ``key`` (default: tenant A's)."""
        token = self.key_a if key is None else key
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30, **kwargs)  # type: ignore[arg-type]


@asynccontextmanager
async def serve(
    agents: Sequence[Agent],
    *,
    store: str = "memory://",
    config: ServerConfig | None = None,
    **settings: object,
) -> AsyncIterator[Served]:
    """Serve ``agents`` on 127.0.0.1 (a free port) until the block ends."""
    options: dict[str, object] = {"store": store, "poll_s": 0.05, "retry_base_s": 0.05, "model_retries": 0}
    options.update(settings)
    runtime = Runtime(store, agents, settings=Settings.build(**options))
    await runtime.open()  # the app's lifespan finds it open; tenants live in its store
    tenants = runtime.store
    a = await tenants.create_tenant("acme")
    b = await tenants.create_tenant("bravo")
    _, key_a = await tenants.create_key(a.id)
    _, key_b = await tenants.create_key(b.id)
    app = create_app(runtime, config or ServerConfig(poll_s=0.2, heartbeat_s=1.0))
    sock = listen("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn_config(app, app.state.server.config, graceful_s=2))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                if task.done():
                    task.result()
                await asyncio.sleep(0.01)
        yield Served(url=f"http://127.0.0.1:{port}", app=app, runtime=runtime, key_a=key_a, key_b=key_b)
    finally:
        server.should_exit = True
        await task
        sock.close()


@dataclass
class Event:
    """One server-sent event."""

    event: str
    data: str
    id: str | None


async def events(response: httpx.Response) -> AsyncIterator[Event]:
    """The events of a streaming SSE response (comments skipped)."""
    kind, eid = "message", None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield Event(event=kind, data="\n".join(data), id=eid)
            kind, data, eid = "message", [], None
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                kind = value
            elif field == "data":
                data.append(value)
            elif field == "id":
                eid = value
