"""dormant as an MCP server: one tenant's long-term memory and threads as MCP tools.

:mod:`.tools` builds the SDK's ``MCPServer`` over :mod:`dormant.server.calls` (the same
functions the REST API calls); :mod:`.http` is ``/mcp`` on ``dormant serve`` (streamable
HTTP, stateless, behind a tenant's API key); :mod:`.stdio` is ``dormant mcp serve``.
Nothing outside the server imports this package, so ``import dormant`` never loads it
(nor the SDK's server parts it needs beyond what the MCP client already loads).

May import: what :mod:`dormant.server` may, its own modules, and the ``mcp`` SDK.
"""
