"""``dormant tenants``: create and list tenants, create, list and revoke their API keys.

Tenants and keys live in the store (any backend: SQLite or PostgreSQL). A key is
printed once, when created; only its salted hash is kept (:mod:`dormant.tenants.keys`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated

import typer
from rich.table import Table

from ..config import DEFAULT_STORE
from ..store import Store
from .base import LimitOpt, StoreOpt, err, opened_store, out, run_async, settings_for, when

tenants_app = typer.Typer(help="Tenants of `dormant serve` and their API keys.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys of a tenant.", no_args_is_help=True)
tenants_app.add_typer(keys_app, name="keys")


@asynccontextmanager
async def directory(store: str) -> AsyncIterator[Store]:
    """The opened store (created if missing), which keeps the tenants and their keys."""
    async with opened_store(settings_for(store)) as opened:
        yield opened


@tenants_app.command("create")
def create(
    name: Annotated[str, typer.Argument(help="Tenant name (unique).")],
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Create a tenant."""

    async def go() -> None:
        async with directory(store) as d:
            tenant = await d.create_tenant(name)
        out.print(f"tenant {tenant.name} created (id {tenant.id})")

    run_async(go())


@tenants_app.command("list")
def list_(
    store: StoreOpt = DEFAULT_STORE,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Resume after this name.")] = None,
    limit: LimitOpt = 50,
) -> None:
    """One page of tenants."""

    async def go() -> None:
        async with directory(store) as d:
            page = await d.list_tenants(cursor=cursor, limit=limit)
        table = Table("name", "id", "created")
        for t in page.items:
            table.add_row(t.name, t.id, when(t.created_at))
        out.print(table)
        if page.next_cursor:
            out.print(f"more: --cursor {page.next_cursor}")

    run_async(go())


@keys_app.command("create")
def key_create(
    tenant: Annotated[str, typer.Argument(help="Tenant name or id.")],
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Create an API key; it is printed once (only its salted hash is stored)."""

    async def go() -> None:
        async with directory(store) as d:
            key, token = await d.create_key(tenant)
        err.print(
            f"key {key.id} for tenant {key.tenant_id}; store it now, it is not shown again:", style="dim"
        )
        out.print(token)

    run_async(go())


@keys_app.command("revoke")
def key_revoke(
    key_id: Annotated[str, typer.Argument(help="Key id (the 16 hex digits after dk_).")],
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Revoke an API key (requests with it get 401 from then on)."""

    async def go() -> None:
        async with directory(store) as d:
            key = await d.revoke_key(key_id)
        out.print(f"key {key.id} of tenant {key.tenant_id} revoked at {when(key.revoked_at or 0)}")

    run_async(go())


@keys_app.command("list")
def key_list(
    tenant: Annotated[str, typer.Argument(help="Tenant name or id.")],
    store: StoreOpt = DEFAULT_STORE,
    cursor: Annotated[str | None, typer.Option("--cursor", help="Resume after this key id.")] = None,
    limit: LimitOpt = 50,
) -> None:
    """One page of a tenant's keys (ids only; secrets are never stored)."""

    async def go() -> None:
        async with directory(store) as d:
            t = await d.tenant(tenant)
            page = await d.list_keys(t.id, cursor=cursor, limit=limit)
        table = Table("key id", "created", "revoked")
        for k in page.items:
            table.add_row(k.id, when(k.created_at), when(k.revoked_at or 0))
        out.print(table)
        if page.next_cursor:
            out.print(f"more: --cursor {page.next_cursor}")

    run_async(go())
