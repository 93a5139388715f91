"""``/mcp`` on ``dormant serve``: the MCP server over streamable HTTP, stateless, behind
a tenant's API key.

:class:`McpEndpoint` is a plain ASGI app. It authenticates the bearer key exactly as the
REST API does (``store.authenticate``; 401 in the REST error shape without a valid one,
before the MCP SDK sees the request), puts the key's tenant on the request, and hands
the request to the SDK's session manager in stateless mode (no session: each POST is
one JSON-RPC exchange, answered as JSON). :meth:`McpEndpoint.run` is held open by the
server's lifespan.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.transport_security import TransportSecuritySettings

from ...errors import DormantError, Unauthenticated
from ...runtime import Runtime
from ...tenants.scope import Scope
from ..hub import Hub
from ..quotas import TenantQuotas
from .tools import build_server

#: Where the tenant of an authenticated request is kept (the ASGI scope's ``state``).
TENANT_KEY = "dormant.tenant"


class McpEndpoint:
    """The ASGI app of ``/mcp`` for ``runtime``."""

    def __init__(
        self, runtime: Runtime, *, quotas: TenantQuotas | None = None, hub: Hub | None = None
    ) -> None:
        self.runtime = runtime
        self.server = build_server(runtime, _tenant_of_request, quotas=quotas, hub=hub)
        # the app is not used: its session manager is, mounted on dormant's own app
        self.server.streamable_http_app(
            stateless_http=True,
            json_response=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        )
        self.manager = self.server.session_manager

    @contextlib.asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """The session manager's task group, for the server's lifetime."""
        async with self.manager.run():
            yield

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            tenant = await self._authenticate(scope)
        except DormantError as exc:
            await _problem(send, 401, exc)
            return
        scope.setdefault("state", {})[TENANT_KEY] = tenant
        await self.manager.handle_request(scope, receive, send)

    async def _authenticate(self, scope: dict[str, Any]) -> str:
        raw = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        header = raw.decode("latin-1")
        kind, _, key = header.partition(" ")
        if kind.lower() != "bearer" or not key.strip():
            raise Unauthenticated("missing bearer API key")
        tenant = await self.runtime.store.authenticate(key.strip())
        return tenant.id


async def _tenant_of_request(ctx: Context) -> Scope:
    request = ctx.request_context.request
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    tenant = state.get(TENANT_KEY)
    if not isinstance(tenant, str):  # never: McpEndpoint authenticates every request first
        raise Unauthenticated("no tenant on this request")
    return Scope(tenant)


async def _problem(send: Any, status: int, exc: DormantError) -> None:
    body = json.dumps({"error": {"code": exc.code, "message": str(exc)}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
