"""A streamable-HTTP MCP server built with the official SDK (``MCPServer``), for the HTTP
transport tests; it listens on 127.0.0.1 and wants ``Authorization: Bearer TOKEN``.

    python -m tests.integration.mcp_http_server PORT TOKEN
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

server = MCPServer("dormant-test-http")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Report progress ``steps`` times, 0.3 s apart, then answer."""
    import anyio

    for step in range(steps):
        await anyio.sleep(0.3)
        await ctx.report_progress(step + 1, steps)
    return f"slow done after {steps} steps"


class Bearer:
    """Refuse every request without the expected bearer token."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if request.headers.get("authorization") != f"Bearer {self.token}":
                response: Response = PlainTextResponse("unauthorized", status_code=401)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


if __name__ == "__main__":
    port, token = int(sys.argv[1]), sys.argv[2]
    app = Bearer(server.streamable_http_app(), token)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
