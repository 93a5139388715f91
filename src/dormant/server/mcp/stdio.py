"""``dormant mcp serve``: the MCP server on stdin/stdout for one tenant (a desktop host
starts it as a subprocess). Slices are not run here: a worker (``dormant run``) or
``dormant serve`` on the same store runs the threads it sends to."""

from __future__ import annotations

from mcp.server.mcpserver import Context

from ...runtime import Runtime
from ...tenants.scope import Scope
from .tools import build_server


async def serve_stdio(runtime: Runtime, tenant: str) -> None:
    """Serve the memory and threads of ``tenant`` (a name or id of the store's tenants;
    NotFound when it has none such) over stdio until stdin closes."""
    await runtime.open()
    try:
        scope = Scope((await runtime.store.tenant(tenant)).id)

        async def tenant_of(ctx: Context) -> Scope:
            return scope

        await build_server(runtime, tenant_of).run_stdio_async()
    finally:
        await runtime.close()
