"""Tenants and API keys on SQLite (see :class:`~dormant.store.backend.Backend`), the
``tenants`` part of :class:`~dormant.store.sqlite.backend.SQLiteBackend`: each write is one job of the
group-committing writer (one transaction), each read one query; the rules are in
:mod:`dormant.tenants.keys`."""

from __future__ import annotations

from collections.abc import Callable

from ...records import ApiKey, Tenant
from ..rows import row_key, row_live_key, row_tenant
from . import sql
from .journal import Query, Write
from .writer import Conn


class SQLiteTenants:
    """Tenant and API key rows."""

    def __init__(self, write: Write, query: Query, clock: Callable[[], float]) -> None:
        self._write = write
        self._query = query
        self.clock = clock

    async def insert_tenant(self, tenant: Tenant) -> bool:
        """Insert the tenant; False when its name or id is taken."""
        params = (tenant.id, tenant.name, tenant.created_at)
        inserted: bool = await self._write(
            lambda conn: bool(conn.execute(sql.INSERT_TENANT, params).fetchall())
        )
        return inserted

    async def find_tenant(self, name_or_id: str) -> Tenant | None:
        """The tenant with that id, else that name; None if neither."""
        rows = self._query(sql.FIND_TENANT, (name_or_id,))
        return row_tenant(rows[0]) if rows else None

    async def tenant_rows(self, after: str, limit: int) -> list[Tenant]:
        """Tenants after ``after`` by name."""
        return [row_tenant(r) for r in self._query(sql.TENANT_PAGE, (after, limit))]

    async def insert_key(self, key: ApiKey, salt: bytes, digest: bytes) -> None:
        """Insert a key of an existing tenant."""
        params = (key.id, key.tenant_id, salt, digest, key.created_at)
        await self._write(lambda conn: conn.execute(sql.INSERT_KEY, params).fetchall())

    async def revoke_key(self, key_id: str, now: float) -> ApiKey | None:
        """Revoke the key unless already revoked; its row, None if missing."""

        def job(conn: Conn) -> ApiKey | None:
            conn.execute(sql.REVOKE_KEY, (key_id, now))
            rows = conn.execute(sql.GET_KEY, (key_id,)).fetchall()
            return row_key(rows[0]) if rows else None

        result: ApiKey | None = await self._write(job)
        return result

    async def key_rows(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        """The tenant's keys after ``after`` by id."""
        return [row_key(r) for r in self._query(sql.KEY_PAGE, (tenant_id, after, limit))]

    async def live_key(self, key_id: str) -> tuple[bytes, bytes, Tenant] | None:
        """A live key's salt, digest and tenant; None if missing or revoked."""
        rows = self._query(sql.LIVE_KEY, (key_id,))
        return row_live_key(rows[0]) if rows else None
