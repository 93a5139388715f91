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

from ..memory.facade import Memory
from . import calls
from .memory_schemas import (
    KEY_PATTERN,
    AddOut,
    BindOut,
    ChangePage,
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
    return await calls.memory_of(runtime_of(request), scope)


@router.post("", status_code=201, response_model=AddOut)
async def add_memory(request: Request, scope: TenantScope, body: MemoryAdd) -> AddOut:
    """Store one memory of a subject durably; it may supersede older ones (``replaces``)
    or merge into an equal one (``duplicate``)."""
    return await calls.add_memory(await memory_of(request, scope), body, actor="http")


@router.post("/recall", response_model=RecallOut)
async def recall_memory(request: Request, scope: TenantScope, body: MemoryRecall) -> RecallOut:
    """The best ``k`` memories of the subject(s) for ``query``, best first."""
    return await calls.recall_memory(await memory_of(request, scope), body)


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
    return await calls.record_history(memory, subject, record_id, cursor=cursor, limit=limit)


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
