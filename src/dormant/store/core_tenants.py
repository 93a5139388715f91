"""The tenant and API key rules of :class:`~dormant.store.core.StoreCore` (a mixin of
it): names checked, keys made and checked by :mod:`dormant.tenants.keys`, pages of the
backend's rows."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import NotFound, Unauthenticated, UsageError
from ..records import ApiKey, Page, Tenant
from ..tenants import keys
from ..tenants import scope as tenancy
from .base import clamp_limit

if TYPE_CHECKING:
    from .backend import Backend


#: Most threads :meth:`TenantRules.subject_threads` returns at once.
MAX_SUBJECT_THREADS = 1000


class TenantRules:
    """Tenants and their API keys (salted hashes only; a token is shown once)."""

    if TYPE_CHECKING:
        backend: Backend

        @property
        def clock(self) -> Callable[[], float]: ...

    async def create_tenant(self, name: str) -> Tenant:
        """A new tenant named ``name``; UsageError for a bad or taken name."""
        tenant = Tenant(id=keys.new_tenant_id(), name=keys.check_name(name), created_at=self.clock())
        if not await self.backend.tenants.insert_tenant(tenant):
            raise UsageError(f"a tenant named {name!r} exists")
        return tenant

    async def tenant(self, name_or_id: str) -> Tenant:
        """The tenant with that id (else that name); NotFound otherwise."""
        tenant = await self.backend.tenants.find_tenant(name_or_id)
        if tenant is None:
            raise NotFound(f"no tenant {name_or_id!r}")
        return tenant

    async def list_tenants(self, *, cursor: str | None = None, limit: int = 50) -> Page[Tenant]:
        """One page of tenants by name; the cursor is the last name seen."""
        limit = clamp_limit(limit)
        rows = await self.backend.tenants.tenant_rows(cursor or "", limit + 1)
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=items[-1].name if len(rows) > limit else None)

    async def create_key(self, tenant_id: str) -> tuple[ApiKey, str]:
        """A new key of the tenant and its token (shown once; only a salted hash is kept)."""
        tenant = await self.tenant(tenant_id)
        key_id, token, salt, digest = keys.new_key()
        key = ApiKey(id=key_id, tenant_id=tenant.id, created_at=self.clock())
        await self.backend.tenants.insert_key(key, salt, digest)
        return key, token

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key (idempotent: it keeps its first revocation time); NotFound if unknown."""
        key = await self.backend.tenants.revoke_key(key_id, self.clock())
        if key is None:
            raise NotFound(f"no API key {key_id!r}")
        return key

    async def list_keys(self, tenant_id: str, *, cursor: str | None = None, limit: int = 50) -> Page[ApiKey]:
        """One page of the tenant's keys by id; the cursor is the last key id seen."""
        limit = clamp_limit(limit)
        rows = await self.backend.tenants.key_rows(tenant_id, cursor or "", limit + 1)
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=items[-1].id if len(rows) > limit else None)

    async def authenticate(self, token: str) -> Tenant:
        """The tenant whose live key ``token`` is; Unauthenticated otherwise (never why)."""
        key_id, secret = keys.parse_key(token)
        found = await self.backend.tenants.live_key(key_id)
        if found is None:
            raise Unauthenticated("invalid API key")
        salt, digest, tenant = found
        if not keys.key_matches(salt, digest, secret):
            raise Unauthenticated("invalid API key")
        return tenant

    async def subject_threads(
        self, thread_id: str, subject: str, *, limit: int = 64, tenant: str | None = None
    ) -> list[str]:
        """The other active threads of ``thread_id``'s tenant whose subject is ``subject``
        (a binding key), most recently updated first, at most ``limit`` (1..1000)."""
        tenancy.check([thread_id], tenant)
        if not 1 <= limit <= MAX_SUBJECT_THREADS:
            raise UsageError(f"limit must be within 1..{MAX_SUBJECT_THREADS}")
        return await self.backend.journal.subject_threads(
            subject, tenancy.tenant_of(thread_id), thread_id, limit
        )
