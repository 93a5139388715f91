"""``dormant mcp list``: each MCP server the ``--app`` agents name, whether it starts, and
its tools as the model sees them (see docs/mcp.md)."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from ..errors import DormantError, UsageError
from .agents import AppOpt
from .apps import load_app
from .base import fail, out, run_async

mcp_app = typer.Typer(help="MCP servers the agents use.", no_args_is_help=True)


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
