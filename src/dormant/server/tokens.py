"""Event-stream tokens: what a browser's ``EventSource`` passes in the URL instead of a key.

``EventSource`` cannot send an ``Authorization`` header, and an API key in a URL ends
up in browser history and proxy logs. So a caller with a key asks
``POST /v1/threads/{id}/events/token`` for a short-lived token and opens
``GET /v1/threads/{id}/events?token=...`` with it.

A token is ``ev1.<tenant id>.<expiry, unix seconds>.<signature>``: the signature is an
HMAC-SHA256, under the server's stream-token secret, of the tenant, the thread id and
the expiry. So a token opens the events of that one thread of that one
tenant, until it expires, and nothing else: not another thread, not another route,
not after ``ttl_s`` (5 minutes by default, at most an hour). It holds no part of the
API key. The tenant must still exist when the token is used.

The secret comes from ``--stream-token-secret`` / ``DORMANT_STREAM_TOKEN_SECRET`` (at
least 32 characters; set the same one on every ``dormant serve`` behind one address),
else it is drawn at random when the app starts, so a restart voids every token issued
before it (a client asks for a new one when its stream is refused with 401).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass, field

from ..errors import Unauthenticated, UsageError

#: The shape of a token; anything else is refused before any HMAC is computed.
TOKEN_PATTERN = r"^ev1\.(t[0-9a-f]{12})\.([0-9]{1,12})\.([A-Za-z0-9_-]{43})$"
_TOKEN = re.compile(TOKEN_PATTERN)
#: Longest token accepted (the pattern's own bound), for the query parameter's max_length.
MAX_TOKEN_CHARS = 4 + 13 + 1 + 12 + 1 + 43
#: Shortest secret accepted from the operator.
MIN_SECRET_CHARS = 32
#: Longest lifetime a server may give its tokens.
MAX_TTL_S = 3600.0


def _sign(secret: bytes, tenant_id: str, thread_id: str, expires: int) -> str:
    message = f"dormant-events-v1\n{tenant_id}\n{thread_id}\n{expires}".encode()
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


@dataclass(frozen=True)
class StreamTokens:
    """Issues and checks event-stream tokens under one secret (see the module)."""

    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)
    ttl_s: float = 300.0

    def __post_init__(self) -> None:
        if not 1 <= self.ttl_s <= MAX_TTL_S:
            raise UsageError(f"stream token lifetime must be 1 to {MAX_TTL_S:g} seconds, not {self.ttl_s:g}")
        if len(self.secret) < MIN_SECRET_CHARS:
            raise UsageError(f"the stream token secret must have at least {MIN_SECRET_CHARS} characters")

    @classmethod
    def from_secret(cls, secret: str | None, ttl_s: float = 300.0) -> StreamTokens:
        """Tokens under ``secret`` (None: a random one of this process)."""
        if secret is None:
            return cls(ttl_s=ttl_s)
        return cls(secret=secret.encode(), ttl_s=ttl_s)

    def issue(self, tenant_id: str, thread_id: str, *, now: float | None = None) -> tuple[str, int]:
        """A token for the events of thread ``thread_id`` (the id the tenant knows it by)
        of ``tenant_id``, and its expiry (unix seconds)."""
        expires = int((time.time() if now is None else now) + self.ttl_s)
        return f"ev1.{tenant_id}.{expires}.{_sign(self.secret, tenant_id, thread_id, expires)}", expires

    def verify(self, token: str, thread_id: str, *, now: float | None = None) -> str:
        """The tenant id a token was issued to, if it is a valid, unexpired token for
        the tenant's thread ``thread_id``; Unauthenticated (401) otherwise."""
        match = _TOKEN.match(token)
        if match is None:
            raise Unauthenticated("malformed events token: ask POST /v1/threads/{id}/events/token for one")
        tenant_id, expires_text, signature = match.groups()
        expires = int(expires_text)
        expected = _sign(self.secret, tenant_id, thread_id, expires)
        if not hmac.compare_digest(signature.encode(), expected.encode()):
            raise Unauthenticated("events token not valid for this thread (or issued by another server)")
        if expires <= (time.time() if now is None else now):
            raise Unauthenticated("events token expired: ask POST .../events/token for a new one")
        return tenant_id
