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
    ModelOpt,
    SystemOpt,
    WorkersOpt,
    agents_for,
    close_models,
    worker_command,
)
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .base import StoreOpt, err, fail, out, settings_for


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
    concurrency: ConcurrencyOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    workers: WorkersOpt = 1,
) -> None:
    """Serve the HTTP API (REST v1, event streams, OpenAI-compatible) until SIGINT/SIGTERM.

    Callers authenticate with API keys of tenants kept in the store (``dormant tenants``).
    """
    from ..server.app import ServerConfig
    from ..server.main import run as run_server
    from ..server.main import serve_http

    settings = settings_for(store, concurrency=concurrency, tenant_slices=tenant_slices)
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
        )
        command[1]["DORMANT_TENANT_SLICES"] = str(settings.tenant_slices)

    async def go() -> None:
        agents = agents_for(app_spec, model, base_url, system)
        config = ServerConfig(
            run_slices=workers == 1,
            poll_s=10.0 if workers == 1 else 0.5,
            tenant_admissions_per_s=tenant_rate,
            tenant_max_threads=tenant_threads,
            metrics_token=metrics_token or None,
        )
        try:
            rt = Runtime(settings.store, agents, settings=settings)
            if bootstrap_tenant is not None:
                await bootstrap(rt.store, bootstrap_tenant)
            await serve_http(
                rt,
                host=host,
                port=port,
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
    """Open ``store``, create tenant ``name`` unless it exists, print a new key of it (stdout)."""
    await store.open()
    try:
        tenant = await store.tenant(name)
    except NotFound:
        tenant = await store.create_tenant(name)
    key, token = await store.create_key(tenant.id)
    err.print(f"key {key.id} for tenant {tenant.name}; it is not shown again:", style="dim")
    out.print(token)
