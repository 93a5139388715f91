"""Tenant names and API keys: the pure rules (no I/O) the store core applies.

A key is shown once, when created: ``dk_<key id>_<secret>``. The store keeps only the
key id, a random salt and ``sha256(salt || secret)``; a secret has 256 random bits, so
a salted fast hash is enough (no password stretching needed) and checking a key
costs one primary-key read and one hash.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from ..errors import InvalidInput, Unauthenticated, UsageError

#: Tenant names: short, printable, no spaces (they appear on command lines).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Tenant ids: ``t`` + 12 hex digits (:func:`new_tenant_id`); ``""`` is the default tenant.
TENANT_ID_RE = re.compile(r"^t[0-9a-f]{12}$")
#: Prefix of every API key (lets secret scanners recognize a leaked key).
KEY_PREFIX = "dk_"
_KEY_RE = re.compile(r"^dk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


def check_name(name: str) -> str:
    """``name`` if it is a valid tenant name; UsageError otherwise."""
    if not NAME_RE.match(name):
        raise UsageError(f"tenant name {name!r}: 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit")
    return name


def new_tenant_id() -> str:
    """A fresh tenant id: ``t`` + 12 hex digits (fixed length: no id is a prefix of another)."""
    return "t" + secrets.token_hex(6)


def check_tenant_id(tenant_id: str) -> str:
    """``tenant_id`` if it is the default tenant (``""``) or has the shape of a tenant id;
    InvalidInput otherwise (a tenant *name* must be resolved to its id first)."""
    if tenant_id and not TENANT_ID_RE.match(tenant_id):
        raise InvalidInput(f"{tenant_id!r:.40} is not a tenant id (t + 12 hex digits, or '' for the default)")
    return tenant_id


def key_hash(salt: bytes, secret: str) -> bytes:
    """The stored digest of a key secret."""
    return hashlib.sha256(salt + secret.encode()).digest()


def new_key() -> tuple[str, str, bytes, bytes]:
    """A fresh key: ``(key id, token shown once, salt, digest)``."""
    key_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    return key_id, f"{KEY_PREFIX}{key_id}_{secret}", salt, key_hash(salt, secret)


def parse_key(token: str) -> tuple[str, str]:
    """``(key id, secret)`` of a token; Unauthenticated for anything malformed."""
    match = _KEY_RE.match(token)
    if match is None:
        raise Unauthenticated("invalid API key")
    return match.group(1), match.group(2)


def key_matches(salt: bytes, digest: bytes, secret: str) -> bool:
    """Whether ``secret`` is the secret whose salted digest is stored (constant time)."""
    return hmac.compare_digest(key_hash(salt, secret), digest)
