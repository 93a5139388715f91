"""Tenants and API keys on PostgreSQL: the ``tenants`` part of
:class:`~dormant.store.postgres.backend.PostgresBackend` (see
:class:`~dormant.store.parts.TenantRows`). Writes go through the pipelined writer
(one transaction each), reads through the pool; the rules are in
:mod:`dormant.tenants.keys`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from ...records import ApiKey, Tenant
from ..rows import row_key, row_live_key, row_tenant
from . import sql
from .reads import PgReads
from .writer import Job


class PgTenants:
    """Tenant and API key rows."""

    def __init__(self, reads: PgReads, write: Callable[[Job], Awaitable[Any]]) -> None:
        self.reads = reads
        self._write = write

    async def insert_tenant(self, tenant: Tenant) -> bool:
        """Insert the tenant; False when its name or id is taken."""
        job = Job(sql.INSERT_TENANT, (tenant.id, tenant.name, tenant.created_at), lambda rows, _: bool(rows))
        inserted: bool = await self._write(job)
        return inserted

    async def find_tenant(self, name_or_id: str) -> Tenant | None:
        """The tenant with that id, else that name; None if neither."""
        rows = await self.reads.rows(sql.FIND_TENANT, {"key": name_or_id})
        return row_tenant(rows[0]) if rows else None

    async def tenant_rows(self, after: str, limit: int) -> list[Tenant]:
        """Tenants after ``after`` by name."""
        return [row_tenant(r) for r in await self.reads.rows(sql.TENANT_PAGE, (after, limit))]

    async def insert_key(self, key: ApiKey, salt: bytes, digest: bytes) -> None:
        """Insert a key of an existing tenant."""
        params = (key.id, key.tenant_id, salt, digest, key.created_at)
        await self._write(Job(sql.INSERT_KEY, params, lambda rows, _: None))

    async def revoke_key(self, key_id: str, now: float) -> ApiKey | None:
        """Revoke the key unless already revoked; its row, None if missing."""
        job = Job(
            sql.REVOKE_KEY, {"id": key_id, "now": now}, lambda rows, _: row_key(rows[0]) if rows else None
        )
        result: ApiKey | None = await self._write(job)
        return result

    async def key_rows(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        """The tenant's keys after ``after`` by id."""
        return [row_key(r) for r in await self.reads.rows(sql.KEY_PAGE, (tenant_id, after, limit))]

    async def live_key(self, key_id: str) -> tuple[bytes, bytes, Tenant] | None:
        """A live key's salt, digest and tenant; None if missing or revoked."""
        rows = await self.reads.rows(sql.LIVE_KEY, (key_id,))
        return row_live_key(rows[0]) if rows else None
