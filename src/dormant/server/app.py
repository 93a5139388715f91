"""The ASGI app: hosts a :class:`~dormant.runtime.Runtime` in its lifespan.

``create_app(runtime)`` builds a FastAPI app whose lifespan opens the runtime's
store (which also keeps the tenants and their API keys), hooks the event hub into the runtime,
runs the runtime (scheduler and dispatcher) unless slices run in other processes,
and stops it all gracefully (running slices finish) on shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, FastAPI, Request, Response
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.security import HTTPAuthorizationCredentials
from starlette.routing import Route

from ..ops.exporter import Exporter, render
from ..runtime import Runtime
from . import approval_routes, problems
from .access import AccessLog, HttpMetrics
from .cors import install_cors
from .hub import Hub
from .limits import BodyLimit
from .multipart import is_multipart
from .quotas import TenantQuotas
from .schemas import Health
from .state import ServerConfig as ServerConfig
from .state import ServerState, bearer, check_metrics_token, state_of
from .tokens import StreamTokens
from .validation import TextGuard

log = logging.getLogger("dormant.server")


def create_app(runtime: Runtime, config: ServerConfig | None = None) -> FastAPI:
    """The HTTP app hosting ``runtime``: health, ``/metrics``, REST v1, event streams and
    the OpenAI-compatible endpoints."""
    from . import (
        memory_routes,
        openai_chat,
        openai_models,
        openai_responses,
        openai_stored,
        routes,
        stream_auth,
        streams,
        upload_routes,
    )

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
    exporter = Exporter(runtime)
    state = ServerState(
        runtime=runtime,
        config=config,
        hub=hub,
        quotas=quotas,
        exporter=exporter,
        tokens=StreamTokens.from_secret(config.stream_token_secret, config.stream_token_ttl_s),
        http=HttpMetrics(exporter.registry),
    )
    from .mcp.http import McpEndpoint  # dormant's MCP server, loaded with the web stack only

    mcp_endpoint = McpEndpoint(runtime, quotas=quotas, hub=hub)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await runtime.open()
        runtime.on_change = hub.changed
        runtime.on_delta = hub.delta
        runtime.dispatcher.on_progress = hub.tool_progress
        stop = asyncio.Event()
        poller = asyncio.create_task(hub.poll(stop), name="dormant-hub-poll")
        sampling = None
        if state.ui_sampler is not None:
            sampling = asyncio.create_task(state.ui_sampler.run(stop), name="dormant-ui-samples")
        if config.run_slices:
            state.run_task = asyncio.create_task(runtime.run(), name="dormant-runtime")
        try:
            async with mcp_endpoint.run():
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
            if sampling is not None:
                await sampling
            runtime.on_change = None
            runtime.on_delta = None
            runtime.dispatcher.on_progress = None
            await runtime.close()

    app = FastAPI(
        title="dormant",
        version="1",
        summary="Durable agent threads over HTTP: native REST v1, resumable events, OpenAI-compatible.",
        lifespan=lifespan,
        docs_url="/docs" if config.docs else None,
        redoc_url="/redoc" if config.docs else None,
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
        request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
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

    if config.ui or config.ui_only:
        from .ui import Sampler, Sessions, blobs, manage, pages, waits

        # one secret for every serve behind an address: derived from the stream-token secret
        secret = config.stream_token_secret
        state.ui_sessions = Sessions(Sessions.derive(secret) if secret else None)
        state.ui_sampler = Sampler(runtime, every_s=config.ui_sample_s, keep=config.ui_samples)
        app.include_router(pages.router)
        app.include_router(blobs.router)
        app.include_router(manage.router)
        app.include_router(waits.router)
    if not config.ui_only:
        app.include_router(upload_routes.router)  # before routes: the same path, multipart bodies
        app.include_router(routes.router)
        app.include_router(approval_routes.router)
        app.include_router(streams.router)
        app.include_router(stream_auth.router)
        app.include_router(memory_routes.router)
        app.include_router(openai_chat.router)
        app.include_router(openai_responses.router)
        app.include_router(openai_stored.router)
        app.include_router(openai_models.router)
        # MCP over streamable HTTP (POST; GET and DELETE answer 405 in stateless mode)
        app.router.routes.append(Route("/mcp", mcp_endpoint, methods=["GET", "POST", "DELETE"]))
    max_body = config.max_body_bytes or runtime.settings.max_input_bytes + 64 * 1024
    app.add_middleware(TextGuard)  # inside BodyLimit: it checks the body BodyLimit bounded
    # a multipart upload streams past the body limit, bounded by the parts limits instead
    stream_max = runtime.settings.max_input_parts_bytes + max_body + 1024 * 1024
    app.add_middleware(BodyLimit, max_bytes=max_body, streamed=is_multipart, stream_max_bytes=stream_max)
    install_cors(app, config.cors_origins)  # outside the body limit: a preflight has no body
    app.add_middleware(AccessLog, metrics=state.http)  # outermost of the app's own
    return app
