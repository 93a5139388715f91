"""What every route of the server shares: its knobs, its state and the caller's tenant.

:func:`create_app` (:mod:`dormant.server.app`) builds a :class:`ServerState` and the
routers reach it through :func:`state_of`; the routers import this module, never
the app, so the app can import the routers.
"""

from __future__ import annotations

import asyncio
import hmac
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ..errors import Unauthenticated
from ..ops.exporter import Exporter
from ..runtime import Runtime
from ..tenants.scope import Scope
from .access import HttpMetrics, note_tenant
from .hub import Hub
from .inflight import Flights
from .quotas import TenantQuotas
from .tokens import StreamTokens


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """The server's own knobs (the runtime's are in :class:`~dormant.config.Settings`)."""

    #: largest request body read (default: the runtime's input limit + 64 KiB of JSON framing)
    max_body_bytes: int | None = None
    #: live text an event-stream connection may have queued before it is dropped
    stream_queue_bytes: int = 64 * 1024
    #: event streams open at once (more: 429)
    max_streams: int = 10_000
    #: seconds between heartbeat comments on an idle event stream
    heartbeat_s: float = 15.0
    #: seconds a blocked write to a stream may take before the client is dropped
    stream_send_timeout_s: float = 30.0
    #: seconds between polls of watched threads (changes made by other processes)
    poll_s: float = 1.0
    #: whether this process runs slices (false: ``--workers N`` run them)
    run_slices: bool = True
    #: seconds an OpenAI-compatible request waits for the agent's reply
    reply_timeout_s: float = 120.0
    #: admissions per second per tenant in this process (0: no limit), and its burst
    tenant_admissions_per_s: float = 0.0
    tenant_admission_burst: int = 0
    #: threads a tenant may have (children included; 0: no limit)
    tenant_max_threads: int = 0
    #: the bearer token ``/metrics`` requires (None: served without authentication; tenant
    #: API keys never open it, since its counts are store-wide)
    metrics_token: str | None = None
    #: messages read per page when an event stream replays history
    replay_page: int = 32
    #: message content (bytes) read per replay page at most (one message always)
    replay_page_bytes: int = 256 * 1024
    #: connection limits (see :mod:`.guard`; the ``http_*`` settings): seconds to send a
    #: request's head, seconds to send its body, head bytes and header lines at most
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    #: browser origins allowed to call the API (CORS; empty: none, no CORS headers sent)
    cors_origins: tuple[str, ...] = ()
    #: serve ``/docs`` and ``/redoc`` (their scripts load from a CDN: a browser offline shows
    #: a blank page); ``/openapi.json`` is served either way
    docs: bool = False
    #: the secret event-stream tokens are signed with (None: random per process) and their
    #: lifetime (see :mod:`.tokens`)
    stream_token_secret: str | None = field(default=None, repr=False)
    stream_token_ttl_s: float = 300.0
    #: the operator's token: the dashboard (``/ui``) shows every tenant to whoever logs in
    #: with it (None: only tenants' API keys log in, each seeing its own tenant)
    admin_token: str | None = field(default=None, repr=False)
    #: serve the dashboard at ``/ui``; with ``ui_only``, serve nothing else (``dormant ui``)
    ui: bool = True
    ui_only: bool = False
    #: seconds between the overview's samples, and samples kept (default: one hour)
    ui_sample_s: float = 10.0
    ui_samples: int = 360


@dataclass
class ServerState:
    """What route handlers reach through ``request.app.state.server``."""

    runtime: Runtime
    config: ServerConfig
    hub: Hub
    quotas: TenantQuotas
    exporter: Exporter
    tokens: StreamTokens
    http: HttpMetrics
    run_task: asyncio.Task[None] | None = None
    #: identical OpenAI-compatible requests in flight, sharing one wait (bounded)
    flights: Flights = field(default_factory=Flights)
    ready_checks: list[Callable[[], Awaitable[str | None]]] = field(default_factory=list)
    #: the dashboard's session signer and its ring of samples (:mod:`.ui`), when it is served
    ui_sessions: Any = None
    ui_sampler: Any = None

    @property
    def max_input_bytes(self) -> int:
        """Largest input content (UTF-8 bytes) the runtime accepts."""
        return self.runtime.settings.max_input_bytes


def state_of(request: Request) -> ServerState:
    """The server state of the app handling ``request``."""
    state = request.app.state.server
    assert isinstance(state, ServerState)
    return state


bearer = HTTPBearer(auto_error=False, description="An API key: `dormant tenants keys create NAME`.")


async def tenant_scope(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]
) -> Scope:
    """The caller's tenant scope, from its bearer API key; 401 without a valid one."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("missing bearer API key")
    tenant = await state_of(request).runtime.store.authenticate(credentials.credentials)
    note_tenant(request, tenant.id)
    return Scope(tenant.id)


def check_metrics_token(config: ServerConfig, credentials: HTTPAuthorizationCredentials | None) -> None:
    """Unauthenticated (401) unless ``/metrics`` is open or the caller sent its token."""
    expected = config.metrics_token
    if expected is None:
        return
    sent = credentials.credentials if credentials is not None else ""
    if (
        credentials is None
        or credentials.scheme.lower() != "bearer"
        or not hmac.compare_digest(sent.encode(), expected.encode())
    ):
        raise Unauthenticated("/metrics needs the server's metrics token (--metrics-token)")
