"""The dashboard's Memory page (any viewer, in its tenant) and Tenants page (the operator).

Memory: find a subject's binding keys by one identity part (a lookup, nothing is
bound), list a subject's records newest first (paged), a record's history of changes
(paged), and the tenant's business dictionary (its first groups). Tenants: list them
(paged), create one, create a key (its secret shown once, on the answer page) or revoke
one. Every write is a form POST with the session's CSRF token, audited.
"""

from __future__ import annotations

import asyncio
import re
import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ...errors import InvalidInput, NotFound
from ...memory.facade import Memory
from ..state import state_of
from .auth import Viewer
from .pages import HEADERS, audit, form_of, guarded, page, viewer_of

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Rows per page, and dictionary groups shown.
PAGE = 50
GROUPS = 100
_KEY = re.compile(r"^b[0-9]+_[0-9a-f]{64}$")
_CURSOR = re.compile(r"^[0-9A-Za-z_.:-]{1,100}$")


def _cursor(raw: str | None) -> str | None:
    return raw if raw and _CURSOR.match(raw) else None


async def _memory(request: Request, viewer: Viewer, tenant: str) -> tuple[Memory, str]:
    """The memory the viewer reads: its tenant's; the operator's choice (a tenant's name or
    id; empty: the library's default tenant)."""
    rt = state_of(request).runtime
    if viewer.tenant is not None:
        return await rt.memory.for_tenant(viewer.tenant), viewer.tenant
    if not tenant:
        return rt.memory, ""
    found = await rt.store.tenant(tenant[:200])
    return await rt.memory.for_tenant(found.id), found.id


@router.get("/memory")
@guarded("memory")
async def memory_page(request: Request) -> Response:
    """Search a subject's memories, a record's history, the business dictionary."""
    viewer = viewer_of(request)
    q = request.query_params
    chosen = q.get("tenant", "")[:200] if viewer.operator else ""
    memory, tenant = await _memory(request, viewer, chosen)
    part, value = q.get("part", "")[:100].strip(), q.get("value", "")[:500].strip()
    key = q.get("key", "").strip()
    record = q.get("record", "").strip()[:64]
    keys = records = changes = None
    links: dict[str, str] = {}
    base = {"tenant": chosen, "part": part, "value": value, "key": key, "record": record}
    if part and value:
        keys = await memory.keys_for(part, value, cursor=_cursor(q.get("kcursor")), limit=PAGE)
        if keys.next_cursor:
            links["keys"] = "/ui/memory?" + urllib.parse.urlencode({**base, "kcursor": keys.next_cursor})
    if key:
        if not _KEY.match(key):
            raise InvalidInput("not a binding key (b<version>_<64 hex digits>)")
        if record:
            await memory.get([key], record)  # NotFound outside the tenant and subject
            changes = await memory.history(
                [key], record_id=record, cursor=_cursor(q.get("hcursor")), limit=PAGE
            )
            if changes.next_cursor:
                links["history"] = "/ui/memory?" + urllib.parse.urlencode(
                    {**base, "hcursor": changes.next_cursor}
                )
        records = await memory.list([key], cursor=_cursor(q.get("rcursor")), limit=PAGE)
        if records.next_cursor:
            links["records"] = "/ui/memory?" + urllib.parse.urlencode(
                {**base, "rcursor": records.next_cursor}
            )
    dictionary = await asyncio.to_thread(memory.core.dictionary, tenant)
    groups = dictionary.groups[:GROUPS]
    return page(
        request,
        viewer,
        "memory.html",
        chosen=chosen,
        part=part,
        value=value,
        key=key,
        record=record,
        keys=keys,
        records=records,
        changes=changes,
        links=links,
        groups=groups,
        total_groups=len(dictionary),
        nav="memory",
    )


def _operator(viewer: Viewer) -> None:
    if not viewer.operator:
        raise NotFound("tenants are the operator's")


@router.get("/tenants")
@guarded("tenants")
async def tenants_page(request: Request) -> Response:
    """Tenants (paged), and the keys of one (paged)."""
    viewer = viewer_of(request)
    _operator(viewer)
    store = state_of(request).runtime.store
    q = request.query_params
    listing = await store.list_tenants(cursor=_cursor(q.get("cursor")), limit=PAGE)
    shown = None
    keys = None
    if q.get("tenant"):
        shown = await store.tenant(q["tenant"][:200])
        keys = await store.list_keys(shown.id, cursor=_cursor(q.get("kcursor")), limit=PAGE)
    return page(request, viewer, "tenants.html", listing=listing, shown=shown, keys=keys, nav="tenants")


@router.post("/tenants")
@guarded("create_tenant")
async def create_tenant(request: Request) -> Response:
    """Create a tenant (audited)."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    _operator(viewer)
    tenant = await state_of(request).runtime.store.create_tenant(fields.get("name", "").strip())
    audit(viewer, "create_tenant", tenant.id, name=tenant.name)
    return RedirectResponse(
        "/ui/tenants?" + urllib.parse.urlencode({"tenant": tenant.id}), 303, headers=HEADERS
    )


@router.post("/tenants/keys")
@guarded("create_key")
async def create_key(request: Request) -> Response:
    """Create a key of a tenant; its secret is on this answer only (audited)."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    _operator(viewer)
    store = state_of(request).runtime.store
    tenant = await store.tenant(fields.get("tenant", "")[:200])
    key, secret = await store.create_key(tenant.id)
    audit(viewer, "create_key", tenant.id, key=key.id)
    return page(request, viewer, "key.html", tenant=tenant, key=key, secret=secret, nav="tenants")


@router.post("/tenants/keys/revoke")
@guarded("revoke_key")
async def revoke_key(request: Request) -> Response:
    """Revoke a key (audited)."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    _operator(viewer)
    key = await state_of(request).runtime.store.revoke_key(fields.get("key", "")[:200])
    audit(viewer, "revoke_key", key.tenant_id, key=key.id)
    return RedirectResponse(
        "/ui/tenants?" + urllib.parse.urlencode({"tenant": key.tenant_id}), 303, headers=HEADERS
    )
