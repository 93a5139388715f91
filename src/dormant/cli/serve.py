"""``dormant serve``: the HTTP API (REST v1, event streams, OpenAI-compatible endpoints)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import DormantError, NotFound, UsageError
from ..runtime import Runtime
from ..store import Store, open_store
from ..urls import redact
from .agents import (
    AppOpt,
    BaseUrlOpt,
    ConcurrencyOpt,
    ContextWindowOpt,
    MaxOutputOpt,
    ModelKnobs,
    ModelOpt,
    ModelTimeoutOpt,
    StreamTimeoutOpt,
    SystemOpt,
    TokenizerOpt,
    WorkersOpt,
    agents_for,
    close_models,
    server_notices,
    worker_command,
)
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .base import StoreOpt, announce_if_new, err, fail, out, settings_for


def serve_command(
    store: StoreOpt = DEFAULT_STORE,
    host: Annotated[
        str, typer.Option("--host", envvar="DORMANT_HOST", help="Address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", envvar="DORMANT_PORT", min=0, max=65535, help="TCP port.")
    ] = 8080,
    bootstrap_tenant: Annotated[
        str | None,
        typer.Option(
            "--bootstrap-tenant",
            envvar="DORMANT_BOOTSTRAP_TENANT",
            help="Create this tenant if missing and print a new API key of it on stdout at start "
            "(for a memory:// store, which no other command can reach).",
        ),
    ] = None,
    tenant_rate: Annotated[
        float,
        typer.Option(
            "--tenant-rate",
            envvar="DORMANT_TENANT_RATE",
            min=0,
            help="Admissions per second per tenant, per serve process (0: no limit; burst: the rate).",
        ),
    ] = 0.0,
    tenant_threads: Annotated[
        int,
        typer.Option(
            "--tenant-threads",
            envvar="DORMANT_TENANT_THREADS",
            min=0,
            help="Threads a tenant may have, children included (0: no limit).",
        ),
    ] = 0,
    tenant_slices: Annotated[
        int | None,
        typer.Option(
            "--tenant-slices",
            envvar="DORMANT_TENANT_SLICES",
            min=0,
            help="Slices one tenant may run at once over every worker (0: no cap; claims are fair "
            "across tenants either way).",
        ),
    ] = None,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            "--metrics-token",
            envvar="DORMANT_METRICS_TOKEN",
            help="Bearer token /metrics requires (unset: /metrics needs none; prefer the variable "
            "to the flag, which `ps` shows).",
        ),
    ] = None,
    admin_token: Annotated[
        str | None,
        typer.Option(
            "--admin-token",
            envvar="DORMANT_ADMIN_TOKEN",
            help="Operator token of the dashboard (/ui): logged in with it, every tenant is shown "
            "(unset: only tenants' API keys log in, each to its own tenant). Prefer the variable.",
            show_default=False,
        ),
    ] = None,
    ui: Annotated[
        bool,
        typer.Option(
            "--ui/--no-ui",
            envvar="DORMANT_UI",
            help="Serve the dashboard at /ui and sample the store's figures for it every 10 s "
            "(--no-ui: neither; /ui answers 404).",
        ),
    ] = True,
    header_timeout: Annotated[
        float | None,
        typer.Option(
            "--header-timeout",
            envvar="DORMANT_HTTP_HEADER_TIMEOUT_S",
            help="Seconds a client may take to send a request's line and headers (else 408, closed). "
            "Default 10.",
            show_default=False,
        ),
    ] = None,
    body_timeout: Annotated[
        float | None,
        typer.Option(
            "--body-timeout",
            envvar="DORMANT_HTTP_BODY_TIMEOUT_S",
            help="Seconds a client may take to send a request's body (else 408, closed). Default 60.",
            show_default=False,
        ),
    ] = None,
    max_header_bytes: Annotated[
        int | None,
        typer.Option(
            "--max-header-bytes",
            envvar="DORMANT_HTTP_MAX_HEADER_BYTES",
            help="Bytes of a request's line and headers at most (else 431, closed). Default 32768.",
            show_default=False,
        ),
    ] = None,
    max_headers: Annotated[
        int | None,
        typer.Option(
            "--max-headers",
            envvar="DORMANT_HTTP_MAX_HEADERS",
            help="Header lines of a request at most (else 431, closed). Default 100.",
            show_default=False,
        ),
    ] = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            envvar="DORMANT_CORS_ORIGIN",
            help="A browser origin (https://app.example.com, or *) whose pages may call the API; "
            "repeatable (the variable: space-separated). Default: none, no CORS headers.",
        ),
    ] = None,
    docs: Annotated[
        bool,
        typer.Option(
            "--docs/--no-docs",
            envvar="DORMANT_DOCS",
            help="Serve /docs (Swagger UI) and /redoc; their scripts load from a CDN, so they need "
            "a browser online. /openapi.json is served either way.",
        ),
    ] = False,
    stream_token_secret: Annotated[
        str | None,
        typer.Option(
            "--stream-token-secret",
            envvar="DORMANT_STREAM_TOKEN_SECRET",
            help="Secret (32+ characters) that event-stream tokens are signed with; the same on every "
            "serve behind one address (unset: random per process, a restart voids tokens). Prefer "
            "the variable to the flag, which `ps` shows.",
            show_default=False,
        ),
    ] = None,
    stream_token_ttl: Annotated[
        float,
        typer.Option(
            "--stream-token-ttl",
            envvar="DORMANT_STREAM_TOKEN_TTL_S",
            min=1,
            max=3600,
            help="Seconds an event-stream token (POST /v1/threads/{id}/events/token) stays valid.",
        ),
    ] = 300.0,
    concurrency: ConcurrencyOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    workers: WorkersOpt = 1,
    context_window: ContextWindowOpt = None,
    max_output: MaxOutputOpt = None,
    model_timeout: ModelTimeoutOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Serve the HTTP API (REST v1, event streams, OpenAI-compatible) until SIGINT/SIGTERM.

    Callers authenticate with API keys of tenants kept in the store (``dormant tenants``).
    The port is bound and the store opened first; a busy port or an unreachable store is
    one error line and exit 2 or 1. A store that does not exist yet is created.
    """
    from ..server.app import ServerConfig
    from ..server.cors import cors_origins
    from ..server.main import listen, open_runtime, serve_http
    from ..server.main import run as run_server
    from ..server.tokens import StreamTokens

    knobs = ModelKnobs(
        context_window=context_window,
        max_output=max_output,
        model_timeout=model_timeout,
        stream_timeout=stream_timeout,
        tokenizer=tokenizer,
    )
    settings = settings_for(
        store,
        concurrency=concurrency,
        tenant_slices=tenant_slices,
        http_header_timeout_s=header_timeout,
        http_body_timeout_s=body_timeout,
        http_max_header_bytes=max_header_bytes,
        http_max_headers=max_headers,
        **knobs.settings(),
    )
    try:
        origins = cors_origins(cors_origin or ())
        StreamTokens.from_secret(stream_token_secret or None, stream_token_ttl)  # checked before serving
    except UsageError as exc:
        fail(exc)
    if workers > 1 and not open_store(settings.store).persistent:
        fail(
            UsageError(
                f"{redact(settings.store)} lives in one process: --workers needs sqlite:///... or postgresql://..."
            )
        )
    command = None
    if workers > 1:
        command = worker_command(
            settings.store,
            until_idle=False,
            concurrency=concurrency,
            app_spec=app_spec,
            model=model,
            base_url=base_url,
            system=system,
            knobs=knobs,
        )
        command[1]["DORMANT_TENANT_SLICES"] = str(settings.tenant_slices)

    async def go() -> None:
        agents = agents_for(app_spec, model, base_url, system, knobs)
        for notice in await server_notices(agents):
            err.print(f"warning: {notice}", style="yellow")
        config = ServerConfig(
            run_slices=workers == 1,
            poll_s=10.0 if workers == 1 else 0.5,
            tenant_admissions_per_s=tenant_rate,
            tenant_max_threads=tenant_threads,
            metrics_token=metrics_token or None,
            header_timeout_s=settings.http_header_timeout_s,
            body_timeout_s=settings.http_body_timeout_s,
            max_header_bytes=settings.http_max_header_bytes,
            max_headers=settings.http_max_headers,
            cors_origins=origins,
            docs=docs,
            stream_token_secret=stream_token_secret or None,
            stream_token_ttl_s=stream_token_ttl,
            admin_token=admin_token or None,
            ui=ui,
        )
        try:
            sock = listen(host, port)  # a busy port: one line, before anything else happens
            rt = Runtime(settings.store, agents, settings=settings)
            try:
                await announce_if_new(rt.store)
                await open_runtime(rt)  # an unreachable store: one line
                if bootstrap_tenant is not None:
                    await bootstrap(rt.store, bootstrap_tenant)
            except BaseException:
                sock.close()
                await rt.close()
                raise
            await serve_http(
                rt,
                host=host,
                port=port,
                sock=sock,
                config=config,
                worker_command=command,
                workers=workers,
                say=lambda line: err.print(line, style="dim"),
            )
        finally:
            await close_models(agents)

    try:
        run_server(go)
    except DormantError as exc:
        fail(exc)


async def bootstrap(store: Store, name: str) -> None:
    """In the opened ``store``, create tenant ``name`` unless it exists; print a new key of it
    (stdout)."""
    try:
        tenant = await store.tenant(name)
    except NotFound:
        tenant = await store.create_tenant(name)
    key, token = await store.create_key(tenant.id)
    err.print(f"key {key.id} for tenant {tenant.name}; it is not shown again:", style="dim")
    out.print(token)
