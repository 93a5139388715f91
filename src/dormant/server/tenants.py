"""Tenants and their API keys, behind the small :class:`TenantDirectory` interface.

A key is shown once, when created: ``dk_<key id>_<secret>``. The directory keeps
only the key id, a random salt and ``sha256(salt || secret)``; a secret has 256
random bits, so a salted fast hash is enough (no password stretching needed) and
checking a key costs one primary-key read and one hash.

:class:`SQLiteTenantDirectory` keeps the directory in its own SQLite file (stdlib
``sqlite3``: no extension is needed). It is deliberately separate from the store:
the store core will own tenant tables once it scopes threads by tenant, and this
module is then folded into it (see the package docstring of :mod:`dormant.server`).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import time
from typing import Protocol

import msgspec

from ..errors import NotFound, StoreError, Unauthenticated, UsageError
from ..records import Page
from ..store.base import clamp_limit

#: Tenant names: short, printable, no spaces (they appear on command lines).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
#: Prefix of every API key (lets secret scanners recognize a leaked key).
KEY_PREFIX = "dk_"
_KEY_RE = re.compile(r"^dk_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant: ``id`` (``t`` + 12 hex digits, fixed length) scopes everything it owns."""

    id: str
    name: str
    created_at: float


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    """An API key's public part (never its secret)."""

    id: str
    tenant_id: str
    created_at: float
    revoked_at: float | None = None


class TenantDirectory(Protocol):
    """Where tenants and API keys live. Every method raises StoreError when the directory fails."""

    async def open(self) -> None:
        """Create the tables if missing."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...

    async def create_tenant(self, name: str) -> Tenant:
        """A new tenant named ``name`` (unique); UsageError for a bad or taken name."""
        ...

    async def tenant(self, name_or_id: str) -> Tenant:
        """The tenant with that name or id; NotFound otherwise."""
        ...

    async def list_tenants(self, *, cursor: str | None = None, limit: int = 50) -> Page[Tenant]:
        """One page of tenants ordered by name."""
        ...

    async def create_key(self, tenant_id: str) -> tuple[ApiKey, str]:
        """A new key for the tenant and its full secret token, which is never stored."""
        ...

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent); NotFound for an unknown key id."""
        ...

    async def list_keys(self, tenant_id: str, *, cursor: str | None = None, limit: int = 50) -> Page[ApiKey]:
        """One page of a tenant's keys ordered by id."""
        ...

    async def authenticate(self, token: str) -> Tenant:
        """The tenant whose live key ``token`` is; Unauthenticated otherwise (without saying why)."""
        ...


def key_hash(salt: bytes, secret: str) -> bytes:
    """The stored digest of a key secret."""
    return hashlib.sha256(salt + secret.encode()).digest()


def parse_key(token: str) -> tuple[str, str]:
    """``(key id, secret)`` of a token; Unauthenticated for anything malformed."""
    match = _KEY_RE.match(token)
    if match is None:
        raise Unauthenticated("invalid API key")
    return match.group(1), match.group(2)


_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_keys (
    id TEXT PRIMARY KEY,
    tenant_id TEXT NOT NULL REFERENCES tenants(id),
    salt BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys(tenant_id, id);
"""


class SQLiteTenantDirectory:
    """A :class:`TenantDirectory` in one SQLite file (``:memory:`` for tests).

    Calls are short primary-key reads and single-row writes, run on the event loop's
    thread (microseconds; no thread hand-off).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise UsageError("the tenant directory is not open")
        return self._conn

    async def open(self) -> None:
        """Create the tables if missing."""
        if self._conn is not None:
            return
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA busy_timeout=5000")
            conn.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"tenant directory {self.path!r}: {exc}") from exc
        self._conn = conn

    async def close(self) -> None:
        """Release the connection."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _run(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        try:
            return self._db().execute(sql, args).fetchall()
        except sqlite3.IntegrityError:
            raise
        except sqlite3.Error as exc:
            raise StoreError(f"tenant directory: {exc}") from exc

    async def create_tenant(self, name: str) -> Tenant:
        """A new tenant named ``name``; UsageError for a bad or taken name."""
        if not NAME_RE.match(name):
            raise UsageError(
                f"tenant name {name!r}: 1-64 of A-Z a-z 0-9 . _ -, starting with a letter or digit"
            )
        tenant = Tenant(id="t" + secrets.token_hex(6), name=name, created_at=time.time())
        try:
            self._run("INSERT INTO tenants VALUES (?, ?, ?)", (tenant.id, tenant.name, tenant.created_at))
        except sqlite3.IntegrityError:
            raise UsageError(f"a tenant named {name!r} exists") from None
        return tenant

    async def tenant(self, name_or_id: str) -> Tenant:
        """The tenant with that name or id; NotFound otherwise."""
        rows = self._run(
            "SELECT id, name, created_at FROM tenants WHERE name = ? OR id = ? LIMIT 1",
            (name_or_id, name_or_id),
        )
        if not rows:
            raise NotFound(f"no tenant {name_or_id!r}")
        tid, name, created = rows[0]
        return Tenant(id=str(tid), name=str(name), created_at=float(created))  # type: ignore[arg-type]

    async def list_tenants(self, *, cursor: str | None = None, limit: int = 50) -> Page[Tenant]:
        """One page of tenants ordered by name; the cursor is the last name seen."""
        limit = clamp_limit(limit)
        rows = self._run(
            "SELECT id, name, created_at FROM tenants WHERE name > ? ORDER BY name LIMIT ?",
            (cursor or "", limit + 1),
        )
        items = tuple(
            Tenant(id=str(r[0]), name=str(r[1]), created_at=float(r[2]))  # type: ignore[arg-type]
            for r in rows[:limit]
        )
        return Page(items=items, next_cursor=items[-1].name if len(rows) > limit else None)

    async def create_key(self, tenant_id: str) -> tuple[ApiKey, str]:
        """A new key for ``tenant_id`` and its token (shown once, never stored)."""
        tenant = await self.tenant(tenant_id)
        key = ApiKey(id=secrets.token_hex(8), tenant_id=tenant.id, created_at=time.time())
        secret = secrets.token_urlsafe(32)
        salt = secrets.token_bytes(16)
        self._run(
            "INSERT INTO api_keys (id, tenant_id, salt, digest, created_at) VALUES (?, ?, ?, ?, ?)",
            (key.id, key.tenant_id, salt, key_hash(salt, secret), key.created_at),
        )
        return key, f"{KEY_PREFIX}{key.id}_{secret}"

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke ``key_id`` (a revoked key stays revoked at its first revocation time)."""
        self._run(
            "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (time.time(), key_id)
        )
        rows = self._run("SELECT id, tenant_id, created_at, revoked_at FROM api_keys WHERE id = ?", (key_id,))
        if not rows:
            raise NotFound(f"no API key {key_id!r}")
        return _key(rows[0])

    async def list_keys(self, tenant_id: str, *, cursor: str | None = None, limit: int = 50) -> Page[ApiKey]:
        """One page of the tenant's keys by id; the cursor is the last key id seen."""
        limit = clamp_limit(limit)
        rows = self._run(
            "SELECT id, tenant_id, created_at, revoked_at FROM api_keys WHERE tenant_id = ? AND id > ? "
            "ORDER BY id LIMIT ?",
            (tenant_id, cursor or "", limit + 1),
        )
        items = tuple(_key(r) for r in rows[:limit])
        return Page(items=items, next_cursor=items[-1].id if len(rows) > limit else None)

    async def authenticate(self, token: str) -> Tenant:
        """The tenant of the live key ``token``; Unauthenticated otherwise."""
        key_id, secret = parse_key(token)
        rows = self._run(
            "SELECT k.salt, k.digest, t.id, t.name, t.created_at FROM api_keys k "
            "JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ? AND k.revoked_at IS NULL",
            (key_id,),
        )
        if not rows:
            raise Unauthenticated("invalid API key")
        salt, digest, tid, name, created = rows[0]
        assert isinstance(salt, bytes) and isinstance(digest, bytes)
        if not hmac.compare_digest(key_hash(salt, secret), digest):
            raise Unauthenticated("invalid API key")
        return Tenant(id=str(tid), name=str(name), created_at=float(created))  # type: ignore[arg-type]


def _key(row: tuple[object, ...]) -> ApiKey:
    kid, tid, created, revoked = row
    return ApiKey(
        id=str(kid),
        tenant_id=str(tid),
        created_at=float(created),  # type: ignore[arg-type]
        revoked_at=None if revoked is None else float(revoked),  # type: ignore[arg-type]
    )


def directory_url(store_url: str) -> str:
    """The default tenant directory for a store: ``<file>.tenants.db`` beside a SQLite
    file; a store that is not a SQLite file needs an explicit ``--tenants`` path."""
    if store_url.startswith("sqlite:///"):
        path = store_url.removeprefix("sqlite:///").split("?", 1)[0]
        if path and path != ":memory:":
            base = path[:-3] if path.endswith(".db") else path
            return base + ".tenants.db"
    raise UsageError(f"give --tenants PATH: no default tenant directory for {store_url!r}")
