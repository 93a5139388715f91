"""An MCP server over stdio, built with the official SDK (``MCPServer``), whose tools answer
with images and files, for the tests of MCP results as content parts.

    python -m tests.integration.mcp_media

- ``chart``: a text and a real PNG (``ImageContent``, base64);
- ``invoice``: an embedded resource holding a PDF (a blob resource);
- ``fake_image``: ``ImageContent`` that claims ``image/png`` but holds an executable.
"""

from __future__ import annotations

import base64

import mcp_types as types
from mcp.server.mcpserver import MCPServer

from tests.media_samples import pdf, png

server = MCPServer("dormant-test-media")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@server.tool()
def chart() -> list[types.TextContent | types.ImageContent]:
    """The sales chart."""
    return [
        types.TextContent(type="text", text="sales by month"),
        types.ImageContent(type="image", data=b64(png(80, 60)), mime_type="image/png"),
    ]


@server.tool()
def invoice() -> list[types.TextContent | types.EmbeddedResource]:
    """The invoice as a PDF."""
    resource = types.BlobResourceContents(
        uri="file:///invoices/4711.pdf", mime_type="application/pdf", blob=b64(pdf("Invoice 4711"))
    )
    return [
        types.TextContent(type="text", text="the invoice"),
        types.EmbeddedResource(type="resource", resource=resource),
    ]


@server.tool()
def fake_image() -> list[types.ImageContent]:
    """An executable that says it is a PNG."""
    return [types.ImageContent(type="image", data=b64(b"MZ\x90\x00" + bytes(64)), mime_type="image/png")]


if __name__ == "__main__":
    server.run("stdio")
