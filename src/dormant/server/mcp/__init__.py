"""dormant as an MCP server: one tenant's long-term memory and threads as MCP tools.

:mod:`.tools` builds the SDK's ``MCPServer`` over :mod:`dormant.server.calls` (the same
functions the REST API calls); :mod:`.http` is ``/mcp`` on ``dormant serve`` (streamable
HTTP, stateless, behind a tenant's API key); :mod:`.stdio` is ``dormant mcp serve``.
The ``mcp`` SDK is imported only here, so neither ``import dormant`` nor a server that
is never asked for MCP loads it.

May import: what :mod:`dormant.server` may, its own modules, and the ``mcp`` SDK.
"""
