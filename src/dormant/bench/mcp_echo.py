"""The MCP server ``dormant bench mcp`` calls: one ``echo`` tool, built with the official
SDK, over stdio. ``python -m dormant.bench.mcp_echo``."""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("dormant-bench-echo")


@server.tool(annotations=ToolAnnotations(idempotent_hint=True, read_only_hint=True))
def echo(text: str) -> str:
    """Answer ``text``."""
    return text


if __name__ == "__main__":
    server.run("stdio")
