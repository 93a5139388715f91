"""Who is looking at the dashboard: login by token, a signed session cookie, CSRF tokens.

The operator token (``--admin-token`` / ``DORMANT_ADMIN_TOKEN``) sees every tenant; a
tenant's API key sees only that tenant. A login sets one cookie, ``dormant_ui``:
``HttpOnly``, ``SameSite=Strict``, ``Path=/ui``, holding ``<payload>.<HMAC-SHA256>``
where the payload (base64url JSON) names the viewer (``*`` for the operator, else a
tenant id), its expiry and a random nonce. Nothing is kept in the process per session,
so sessions add nothing to RSS. Every POST carries a CSRF token, the HMAC of the
session's nonce, in a form field (or the ``X-CSRF-Token`` header), and a POST whose
``Origin`` is another site is refused before its form is read.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass

import msgspec

#: The session cookie's name.
COOKIE = "dormant_ui"
#: Seconds a session lasts.
SESSION_S = 8 * 3600
#: The viewer id of the operator.
OPERATOR = "*"


@dataclass(frozen=True)
class Viewer:
    """A logged-in viewer: the operator (``tenant`` None: every tenant) or one tenant."""

    tenant: str | None
    nonce: str
    expires: float
    #: the id of the API key a tenant logged in with (its public part, never the secret)
    key: str | None = None

    @property
    def operator(self) -> bool:
        """Whether this viewer sees every tenant."""
        return self.tenant is None


class _Payload(msgspec.Struct, frozen=True):
    w: str
    e: float
    n: str
    k: str = ""


class Sessions:
    """Signs and checks session cookies and CSRF tokens under one secret."""

    def __init__(self, secret: bytes | None = None, *, ttl_s: float = SESSION_S) -> None:
        self.secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s

    @staticmethod
    def derive(secret: str) -> bytes:
        """The session secret derived from a configured secret (the stream-token secret):
        sessions then hold across every serve process sharing it, and across restarts."""
        return hmac.new(secret.encode(), b"dormant-ui-sessions", hashlib.sha256).digest()

    def _mac(self, data: bytes) -> str:
        return (
            base64.urlsafe_b64encode(hmac.new(self.secret, data, hashlib.sha256).digest())
            .decode()
            .rstrip("=")
        )

    def issue(self, tenant: str | None, now: float | None = None, *, key: str | None = None) -> str:
        """A cookie value for ``tenant`` (None: the operator), logged in with key ``key``."""
        payload = _Payload(
            w=OPERATOR if tenant is None else tenant,
            e=(now or time.time()) + self.ttl_s,
            n=secrets.token_urlsafe(16),
            k=key or "",
        )
        body = base64.urlsafe_b64encode(msgspec.json.encode(payload)).decode().rstrip("=")
        return f"{body}.{self._mac(body.encode())}"

    def check(self, cookie: str | None, now: float | None = None) -> Viewer | None:
        """The viewer a cookie names, or None (missing, forged, malformed or expired)."""
        if not cookie or len(cookie) > 1024 or "." not in cookie:
            return None
        body, _, mac = cookie.partition(".")
        if not hmac.compare_digest(mac.encode(), self._mac(body.encode()).encode()):
            return None
        try:
            payload = msgspec.json.decode(
                base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)), type=_Payload
            )
        except (ValueError, msgspec.DecodeError):
            return None
        if payload.e < (now or time.time()):
            return None
        return Viewer(
            tenant=None if payload.w == OPERATOR else payload.w,
            nonce=payload.n,
            expires=payload.e,
            key=payload.k or None,
        )

    def csrf(self, viewer: Viewer) -> str:
        """The CSRF token of ``viewer``'s session."""
        return self._mac(b"csrf:" + viewer.nonce.encode())

    def csrf_ok(self, viewer: Viewer, token: str | None) -> bool:
        """Whether ``token`` is the CSRF token of ``viewer``'s session."""
        return bool(token) and hmac.compare_digest(str(token).encode(), self.csrf(viewer).encode())


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a request's ``Origin`` header (absent: true, as a same-origin form of an old
    browser) names the host it was sent to."""
    if origin is None:
        return True
    if origin == "null" or host is None:
        return False
    return origin.split("://", 1)[-1] == host
