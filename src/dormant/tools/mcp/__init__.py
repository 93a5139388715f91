"""MCP: tools from Model Context Protocol servers, behind the outbox.

Owns the server configuration (:mod:`.config`: :class:`McpServer`, ``mcp.json``), the
clash-free names the model sees (:mod:`.naming`), the bounded stdio transport
(:mod:`.stdio`), one supervised connection per server per worker (:mod:`.link`) and
the hub that lists servers' tools into agents' toolboxes and turns results into
text and blobs (:mod:`.hub`). The protocol itself is the official ``mcp`` SDK's.

May import: the package root's vocabulary (``errors``, ``urls``), :mod:`dormant.tools`'s
``spec`` and ``blobs``, and the ``mcp`` SDK.
"""

from .config import McpServer, load_mcp_json, servers_from_json

__all__ = ["McpServer", "load_mcp_json", "servers_from_json"]
