"""The memory endpoints of the REST API (v1): add, recall, history, bind, rebind.

Every call runs on the caller's tenant's view of the runtime's memory
(``rt.memory.for_tenant``): records, binding keys and history live per tenant, so
another tenant's record id or cursor answers 404 and its subject keys recall nothing.
Errors go through the one table (:mod:`dormant.errors`, see :mod:`.problems`).
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request

from ..errors import InvalidInput
from ..memory.facade import Memory
from .memory_schemas import (
    KEY_PATTERN,
    AddOut,
    BindOut,
    ChangeOut,
    ChangePage,
    HitOut,
    Identity,
    MemoryAdd,
    MemoryBind,
    MemoryRebind,
    MemoryRecall,
    RebindOut,
    RecallOut,
)
from .routes import ERRORS, TenantScope, runtime_of

router = APIRouter(prefix="/v1/memory", tags=["memory"], responses=ERRORS)

#: Memory ids in paths (uuid-ish hex, checked again by the store).
_KEY = re.compile(KEY_PATTERN)
RecordId = Annotated[str, Path(pattern=r"^[A-Za-z0-9_-]{1,64}$")]


async def memory_of(request: Request, scope: TenantScope) -> Memory:
    """The runtime's memory as the caller's tenant sees it."""
    return await runtime_of(request).memory.for_tenant(scope.tenant_id)


async def subject_keys(memory: Memory, keys: list[str], identity: Identity | None) -> list[str]:
    """The binding keys a body names: its keys, or its identity parts bound."""
    return [await memory.bind(identity)] if identity is not None else list(keys)


@router.post("", status_code=201, response_model=AddOut)
async def add_memory(request: Request, scope: TenantScope, body: MemoryAdd) -> AddOut:
    """Store one memory of a subject durably; it may supersede older ones (``replaces``)
    or merge into an equal one (``duplicate``)."""
    memory = await memory_of(request, scope)
    (subject,) = await subject_keys(memory, [body.subject] if body.subject else [], body.identity)
    result = await memory.add(
        subject,
        body.text,
        kind=body.kind,
        tags=body.tags,
        importance=body.importance,
        replaces=body.replaces,
        valid_from=body.valid_from,
        observed_at=body.observed_at,
        actor="http",
    )
    return AddOut.of(result)


@router.post("/recall", response_model=RecallOut)
async def recall_memory(request: Request, scope: TenantScope, body: MemoryRecall) -> RecallOut:
    """The best ``k`` memories of the subject(s) for ``query``, best first."""
    memory = await memory_of(request, scope)
    keys = await subject_keys(memory, body.subjects, body.identity)
    recall = await memory.recall(
        keys,
        body.query,
        tags=body.tags,
        kinds=body.kinds,
        k=body.k,
        at=body.at,
        history=body.history,
        explain=body.explain,
    )
    return RecallOut(items=[HitOut.of(h) for h in recall.hits], degraded=list(recall.degraded))


@router.get("/{record_id}/history", response_model=ChangePage)
async def memory_history(
    request: Request,
    scope: TenantScope,
    record_id: RecordId,
    subject: Annotated[list[str], Query(min_length=1, max_length=64)],
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
) -> ChangePage:
    """One page of a record's changes, oldest first; ``subject``: its binding key(s).
    404 for a record the tenant does not have under those keys."""
    memory = await memory_of(request, scope)
    for key in subject:
        if not _KEY.match(key):
            raise InvalidInput("subject: not a binding key")
    await memory.get(subject, record_id)  # NotFound outside the tenant and subject
    page = await memory.history(subject, record_id=record_id, cursor=cursor, limit=limit)
    return ChangePage(items=[ChangeOut.of(c) for c in page.items], next_cursor=page.next_cursor)


@router.post("/bind", response_model=BindOut)
async def bind_identity(request: Request, scope: TenantScope, body: MemoryBind) -> BindOut:
    """The binding key of identity parts (the same parts always give the same key)."""
    memory = await memory_of(request, scope)
    return BindOut(key=await memory.bind(body.identity))


@router.post("/rebind", response_model=RebindOut)
async def rebind_keys(request: Request, scope: TenantScope, body: MemoryRebind) -> RebindOut:
    """Move (or merge) ``old``'s memories to ``new`` (later writes to ``old`` land on
    ``new``), or link / unlink the two keys; audited in the history."""
    memory = await memory_of(request, scope)
    return RebindOut(changed=await memory.rebind(body.old, body.new, mode=body.mode, actor="http"))
