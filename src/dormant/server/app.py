"""The ASGI app: hosts a :class:`~dormant.runtime.Runtime` in its lifespan.

``create_app(runtime)`` builds a FastAPI app whose lifespan opens the runtime's
store (which also keeps the tenants and their API keys), hooks the event hub into the runtime,
runs the runtime (scheduler and dispatcher) unless slices run in other processes,
and stops it all gracefully (running slices finish) on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import Unauthenticated
from ..exporter import Exporter, render
from ..runtime import Runtime
from ..store.tenancy import Scope
from . import problems
from .hub import Hub
from .inflight import Flights
from .limits import BodyLimit
from .quotas import TenantQuotas
from .schemas import Health
from .validation import TextGuard

log = logging.getLogger("dormant.server")


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """The server's own knobs (the runtime's are in :class:`~dormant.config.Settings`)."""

    #: largest request body read (default: the runtime's input limit + 64 KiB of JSON framing)
    max_body_bytes: int | None = None
    #: live text an event-stream connection may have queued before it is dropped
    stream_queue_bytes: int = 64 * 1024
    #: event streams open at once (more: 429)
    max_streams: int = 10_000
    #: seconds between heartbeat comments on an idle event stream
    heartbeat_s: float = 15.0
    #: seconds a blocked write to a stream may take before the client is dropped
    stream_send_timeout_s: float = 30.0
    #: seconds between polls of watched threads (changes made by other processes)
    poll_s: float = 1.0
    #: whether this process runs slices (false: ``--workers N`` run them)
    run_slices: bool = True
    #: seconds an OpenAI-compatible request waits for the agent's reply
    reply_timeout_s: float = 120.0
    #: admissions per second per tenant in this process (0: no limit), and its burst
    tenant_admissions_per_s: float = 0.0
    tenant_admission_burst: int = 0
    #: threads a tenant may have (children included; 0: no limit)
    tenant_max_threads: int = 0
    #: the bearer token ``/metrics`` requires (None: served without authentication; tenant
    #: API keys never open it, since its counts are store-wide)
    metrics_token: str | None = None
    #: messages read per page when an event stream replays history
    replay_page: int = 32
    #: message content (bytes) read per replay page at most (one message always)
    replay_page_bytes: int = 256 * 1024


@dataclass
class ServerState:
    """What route handlers reach through ``request.app.state.server``."""

    runtime: Runtime
    config: ServerConfig
    hub: Hub
    quotas: TenantQuotas
    exporter: Exporter
    run_task: asyncio.Task[None] | None = None
    #: identical OpenAI-compatible requests in flight, sharing one wait (bounded)
    flights: Flights = field(default_factory=Flights)
    ready_checks: list[Callable[[], Awaitable[str | None]]] = field(default_factory=list)

    @property
    def max_input_bytes(self) -> int:
        """Largest input content (UTF-8 bytes) the runtime accepts."""
        return self.runtime.settings.max_input_bytes


def state_of(request: Request) -> ServerState:
    """The server state of the app handling ``request``."""
    state = request.app.state.server
    assert isinstance(state, ServerState)
    return state


_bearer = HTTPBearer(auto_error=False, description="An API key: `dormant tenants keys create NAME`.")


async def tenant_scope(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Scope:
    """The caller's tenant scope, from its bearer API key; 401 without a valid one."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("missing bearer API key")
    tenant = await state_of(request).runtime.store.authenticate(credentials.credentials)
    return Scope(tenant.id)


def check_metrics_token(config: ServerConfig, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Unauthenticated (401) unless ``/metrics`` is open or the caller sent its token."""
    expected = config.metrics_token
    if expected is None:
        return
    sent = credentials.credentials if credentials is not None else ""
    if (
        credentials is None
        or credentials.scheme.lower() != "bearer"
        or not hmac.compare_digest(sent.encode(), expected.encode())
    ):
        raise Unauthenticated("/metrics needs the server's metrics token (--metrics-token)")


def create_app(runtime: Runtime, config: ServerConfig | None = None) -> FastAPI:
    """The HTTP app hosting ``runtime``: health, ``/metrics``, REST v1, event streams and
    the OpenAI-compatible endpoints."""
    from . import memory_routes, openai_chat, openai_models, openai_responses, openai_stored, routes, streams

    config = config or ServerConfig()
    hub = Hub(
        runtime.thread,
        max_subscribers=config.max_streams,
        queue_bytes=config.stream_queue_bytes,
        poll_s=config.poll_s,
    )
    quotas = TenantQuotas(
        admissions_per_s=config.tenant_admissions_per_s,
        burst=config.tenant_admission_burst,
        max_threads=config.tenant_max_threads,
    )
    state = ServerState(runtime=runtime, config=config, hub=hub, quotas=quotas, exporter=Exporter(runtime))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.open()
        runtime.on_change = hub.changed
        runtime.on_delta = hub.delta
        stop = asyncio.Event()
        poller = asyncio.create_task(hub.poll(stop), name="dormant-hub-poll")
        if config.run_slices:
            state.run_task = asyncio.create_task(runtime.run(), name="dormant-runtime")
        try:
            yield
        finally:
            stop.set()
            runtime.stop()
            if state.run_task is not None:
                try:
                    await state.run_task
                except Exception as exc:
                    log.error("runtime_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            await poller
            runtime.on_change = None
            runtime.on_delta = None
            await runtime.close()

    app = FastAPI(
        title="dormant",
        version="1",
        summary="Durable agent threads over HTTP: native REST v1, resumable events, OpenAI-compatible.",
        lifespan=lifespan,
    )
    app.state.server = state
    problems.install(app)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """Live: the process answers."""
        return Health(status="ok")

    @app.get("/readyz", response_model=Health, tags=["health"], responses={503: {"model": Health}})
    async def readyz(request: Request) -> Health | JSONResponse:
        """Ready: the store answers (its schema was migrated when it opened) and the runtime runs."""
        st = state_of(request)
        problem: str | None = None
        try:
            await st.runtime.status()
        except Exception as exc:
            problem = f"store: {type(exc).__name__}: {exc}"
        if problem is None and st.run_task is not None and st.run_task.done():
            problem = "the runtime stopped"
        for check in st.ready_checks:
            if problem is None:
                problem = await check()
        if problem is not None:
            return JSONResponse(Health(status="unavailable", detail=problem).model_dump(), status_code=503)
        return Health(status="ok")

    @app.get("/metrics", response_class=PlainTextResponse, include_in_schema=False)
    async def metrics(
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> Response:
        """Prometheus metrics of this process and the store (those of ``dormant run
        --metrics-port``): open, or behind the metrics token when one is set (never a
        tenant's key: the counts are store-wide). 503 when the store cannot be read."""
        st = state_of(request)
        check_metrics_token(st.config, credentials)
        try:
            body, content_type = await render(st.exporter)
        except Exception as exc:  # a failed scrape says so; it never reports stale success
            return PlainTextResponse(f"{type(exc).__name__}: {exc}\n", status_code=503)
        return Response(body, media_type=content_type)

    app.include_router(routes.router)
    app.include_router(streams.router)
    app.include_router(memory_routes.router)
    app.include_router(openai_chat.router)
    app.include_router(openai_responses.router)
    app.include_router(openai_stored.router)
    app.include_router(openai_models.router)
    max_body = config.max_body_bytes or runtime.settings.max_input_bytes + 64 * 1024
    app.add_middleware(TextGuard)  # inside BodyLimit: it checks the body BodyLimit bounded
    app.add_middleware(BodyLimit, max_bytes=max_body)
    return app
