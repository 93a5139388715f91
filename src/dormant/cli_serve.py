"""``dormant serve``: the HTTP API (REST v1, event streams, OpenAI-compatible endpoints)."""

from __future__ import annotations

from typing import Annotated

import typer

from .app import DEFAULT_BASE_URL, SCRIPTED
from .cli_agents import (
    AppOpt,
    BaseUrlOpt,
    ConcurrencyOpt,
    ModelOpt,
    SystemOpt,
    agents_for,
    close_models,
    worker_command,
)
from .cli_base import StoreOpt, err, fail, settings_for
from .config import DEFAULT_STORE
from .errors import DormantError, UsageError
from .runtime import Runtime
from .store import open_store
from .urls import redact


def serve_command(
    store: StoreOpt = DEFAULT_STORE,
    host: Annotated[
        str, typer.Option("--host", envvar="DORMANT_HOST", help="Address to listen on.")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", envvar="DORMANT_PORT", min=0, max=65535, help="TCP port.")
    ] = 8080,
    tenants: Annotated[
        str | None,
        typer.Option(
            "--tenants",
            envvar="DORMANT_TENANTS",
            help="Tenant directory (a SQLite file; default: <store file>.tenants.db).",
        ),
    ] = None,
    concurrency: ConcurrencyOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            envvar="DORMANT_WORKERS",
            min=1,
            max=256,
            help="1: this process runs the slices. N > 1: N supervised `dormant run` processes run them "
            "and this process serves HTTP.",
        ),
    ] = 1,
) -> None:
    """Serve the HTTP API (REST v1, event streams, OpenAI-compatible) until SIGINT/SIGTERM."""
    from .server.app import ServerConfig
    from .server.cli_tenants import tenants_path
    from .server.main import run as run_server
    from .server.main import serve_http
    from .server.tenants import SQLiteTenantDirectory

    settings = settings_for(store, concurrency=concurrency)
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

    async def go() -> None:
        agents = agents_for(app_spec, model, base_url, system)
        directory = SQLiteTenantDirectory(tenants_path(tenants, settings.store))
        config = ServerConfig(run_slices=workers == 1, poll_s=10.0 if workers == 1 else 0.5)
        try:
            rt = Runtime(settings.store, agents, settings=settings)
            await serve_http(
                rt,
                directory,
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
