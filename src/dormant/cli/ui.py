"""``dormant ui``: the dashboard alone, on loopback, beside the processes that run slices."""

from __future__ import annotations

import secrets
from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import DormantError
from ..runtime import Runtime
from .agents import ModelKnobs, agents_for, close_models
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .base import StoreOpt, announce_if_new, err, fail, settings_for


def ui_command(
    store: StoreOpt = DEFAULT_STORE,
    port: Annotated[
        int, typer.Option("--port", envvar="DORMANT_UI_PORT", min=0, max=65535, help="TCP port on 127.0.0.1.")
    ] = 8090,
    admin_token: Annotated[
        str | None,
        typer.Option(
            "--admin-token",
            envvar="DORMANT_ADMIN_TOKEN",
            help="Operator token to log in with (unset: a random one, printed at start).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve only the dashboard (/ui) on 127.0.0.1, over the store that `dormant run` or
    `dormant serve` work on: this process runs no slices (a retry it makes is run by them)."""
    from ..server.app import ServerConfig
    from ..server.main import listen, open_runtime, serve_http
    from ..server.main import run as run_server

    token = admin_token or secrets.token_urlsafe(24)
    settings = settings_for(store)

    async def go() -> None:
        agents = agents_for(None, SCRIPTED, DEFAULT_BASE_URL, None, ModelKnobs())
        config = ServerConfig(run_slices=False, ui_only=True, admin_token=token, poll_s=10.0)
        try:
            sock = listen("127.0.0.1", port)
            rt = Runtime(settings.store, agents, settings=settings)
            try:
                await announce_if_new(rt.store)
                await open_runtime(rt)
            except BaseException:
                sock.close()
                await rt.close()
                raise
            if admin_token is None:
                err.print(f"operator token (not shown again): {token}", style="dim")
            bound = sock.getsockname()[1]
            await serve_http(
                rt,
                host="127.0.0.1",
                port=port,
                sock=sock,
                config=config,
                say=lambda _: err.print(f"dashboard at http://127.0.0.1:{bound}/ui", style="dim"),
            )
        finally:
            await close_models(agents)

    try:
        run_server(go)
    except DormantError as exc:
        fail(exc)
