"""Event-stream tokens over HTTP (see :mod:`.tokens`).

``POST /v1/threads/{thread_id}/events/token`` (bearer API key) answers
``{"token": ..., "expires_at": <unix seconds>}`` for one of the caller's threads (404 for
any other), and :func:`stream_scope` lets ``GET /v1/threads/{thread_id}/events`` take
that token as ``?token=`` instead of the ``Authorization`` header.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel

from ..errors import NotFound, Unauthenticated
from ..tenants.scope import Scope
from .access import note_tenant
from .routes import ERRORS, TenantScope
from .state import bearer, state_of, tenant_scope
from .tokens import MAX_TOKEN_CHARS

router = APIRouter(prefix="/v1", tags=["events"], responses=ERRORS)


class StreamToken(BaseModel):
    """A token opening one thread's event stream until ``expires_at`` (unix seconds)."""

    token: str
    expires_at: int


@router.post("/threads/{thread_id}/events/token", response_model=StreamToken)
async def events_token(request: Request, scope: TenantScope, thread_id: str) -> StreamToken:
    """A short-lived token for ``GET /v1/threads/{thread_id}/events?token=...``, for clients
    that cannot send an ``Authorization`` header (a browser's ``EventSource``). It opens
    that thread's events only, until it expires; it holds no part of the API key."""
    state = state_of(request)
    inner = scope.inner(thread_id)
    await state.runtime.thread(inner, tenant=scope.tenant_id)  # 404 for a thread it does not have
    token, expires = state.tokens.issue(scope.tenant_id, thread_id)
    return StreamToken(token=token, expires_at=expires)


async def stream_scope(
    request: Request,
    thread_id: str,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    token: Annotated[
        str | None,
        Query(
            max_length=MAX_TOKEN_CHARS,
            description="an events token (POST /v1/threads/{thread_id}/events/token), instead of "
            "the Authorization header",
        ),
    ] = None,
) -> Scope:
    """The caller's scope from ``?token=`` when given (401 unless valid for this thread),
    else from the bearer API key."""
    if token is None:
        return await tenant_scope(request, credentials)
    state = state_of(request)
    Scope("").inner(thread_id)  # a malformed id is 422 whatever the token
    tenant_id = state.tokens.verify(token, thread_id)
    try:
        await state.runtime.store.tenant(tenant_id)
    except NotFound:
        raise Unauthenticated("events token of a tenant that no longer exists") from None
    note_tenant(request, tenant_id)
    return Scope(tenant_id)


StreamScope = Annotated[Scope, Depends(stream_scope)]
