"""``dormant mcp list``: each MCP server the ``--app`` agents name, whether it starts, and
its tools as the model sees them; ``dormant mcp serve``: dormant's own memory and threads
as an MCP server on stdio, for one tenant (see docs/mcp.md)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import DormantError, UsageError
from .agents import AppOpt, agents_for
from .apps import DEFAULT_BASE_URL, SCRIPTED, load_app
from .base import StoreOpt, fail, out, run_async, settings_for

mcp_app = typer.Typer(help="MCP: the servers the agents use, and dormant as one.", no_args_is_help=True)


@mcp_app.command("list")
def list_servers(
    app_spec: AppOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
) -> None:
    """Start each server the app's agents name (and mcp.json beside the app names), list its
    tools, stop it. Exit status 1 when a server does not start."""
    from ..tools.mcp.hub import McpHub

    try:
        if not app_spec:
            raise UsageError("--app is needed: the agents whose MCP servers to list")
        agents = load_app(app_spec)
        hub = McpHub([(a.mcp, a.toolbox) for a in agents if a.mcp])
    except DormantError as exc:
        fail(exc)

    async def go() -> list[dict[str, object]]:
        try:
            await hub.start()
        finally:
            await hub.close()
        shown = []
        for status in hub.status():
            box = next(a.toolbox for a in agents if any(s.name == status.name for s in a.mcp))
            tools = [
                {"name": name, "idempotent": spec.idempotent, "timeout_s": spec.timeout}
                for name in status.tools
                if (spec := box.get(name)) is not None
            ]
            starts = status.counters["starts"] > 0 and status.error is None
            shown.append(
                {
                    "name": status.name,
                    "transport": status.transport,
                    "where": status.where,
                    "starts": starts,
                    "error": status.error,
                    "tools": tools,
                    "cut": status.cut,
                }
            )
        return shown

    servers = run_async(go())
    if as_json:
        sys.stdout.write(json.dumps(servers, indent=2) + "\n")
    else:
        if not servers:
            out.print("no MCP servers are named by these agents")
        for server in servers:
            state = "starts" if server["starts"] else f"does not start: {server['error']}"
            out.print(f"{server['name']} ({server['transport']}, {server['where']}): {state}")
            for item in server["tools"]:  # type: ignore[attr-defined]
                mark = "idempotent" if item["idempotent"] else "not idempotent"
                out.print(f"  {item['name']}  ({mark})")
            if server["cut"]:
                out.print("  (listing cut at the configured bound)")
    if any(not s["starts"] for s in servers):
        raise typer.Exit(1)


@mcp_app.command("serve")
def serve(
    tenant: Annotated[
        str,
        typer.Option(
            "--tenant",
            envvar="DORMANT_TENANT",
            help="The tenant (name or id) whose memory and threads to serve.",
        ),
    ],
    store: StoreOpt = DEFAULT_STORE,
    app_spec: AppOpt = None,
) -> None:
    """Serve one tenant's long-term memory and threads as an MCP server on stdin/stdout (for
    a desktop MCP host). Threads run in a worker (`dormant run` or `dormant serve`) on the
    same store; this process only admits and reads."""
    from ..runtime import Runtime
    from ..server.mcp.stdio import serve_stdio

    try:
        settings = settings_for(store)
        agents = agents_for(app_spec, SCRIPTED, DEFAULT_BASE_URL, None)
    except DormantError as exc:
        fail(exc)
    run_async(serve_stdio(Runtime(settings.store, agents, settings=settings), tenant))
