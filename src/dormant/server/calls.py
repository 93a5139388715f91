"""What the REST routes and the MCP tools both do, written once: an input admitted to a
thread, a page of its messages, its metadata, and the memory calls.

Each function takes the runtime and the caller's tenant :class:`~dormant.tenants.scope.Scope`
(never a request), validates through the same bodies as the REST API, and answers the
wire models of :mod:`.schemas` / :mod:`.memory_schemas`; errors are the
:mod:`dormant.errors` hierarchy, which each surface renders its own way (HTTP problems,
MCP errors). Another tenant's thread, record or cursor is NotFound.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Literal

from ..errors import Busy, IdempotencyMismatch, InvalidInput, PayloadTooLarge, UsageError
from ..memory.facade import Memory
from ..parts import Limits, Text, store_parts
from ..parts.inputs import PartInput
from ..records import NewInput, Priority
from ..runtime import Runtime
from ..tenants.scope import Scope
from .hub import Hub
from .idempotency import body_fingerprint
from .memory_schemas import (
    KEY_PATTERN,
    AddOut,
    ChangeOut,
    ChangePage,
    HitOut,
    Identity,
    MemoryAdd,
    MemoryRecall,
    RecallOut,
)
from .quotas import TenantQuotas
from .schemas import AdmissionOut, InputCreate, MessageOut, MessagePage, PrunedOut, ThreadOut
from .uploads import admit_parts

_KEY = re.compile(KEY_PATTERN)


def agent_name(rt: Runtime, agent: str | None) -> str:
    """``agent`` (or the default agent), checked to exist."""
    name = agent or rt.default_agent
    if name not in rt.agents:
        raise UsageError(f"unknown agent {name!r} (this server hosts: {', '.join(sorted(rt.agents))})")
    return name


def check_size(rt: Runtime, content: str) -> None:
    """PayloadTooLarge (413) for content over the runtime's input limit."""
    limit = rt.settings.max_input_bytes
    if len(content.encode()) > limit:
        raise PayloadTooLarge(f"content over {limit} bytes")


async def send_input(
    rt: Runtime,
    scope: Scope,
    thread_id: str,
    body: InputCreate,
    *,
    dedup_key: str | None,
    origin: str = "http",
    quotas: TenantQuotas | None = None,
    hub: Hub | None = None,
    media: Sequence[PartInput] = (),
    fingerprint: str | None = None,
) -> AdmissionOut:
    """Admit ``body`` to the tenant's thread ``thread_id`` (created with ``body.agent`` when
    new); answered once durable. The same ``dedup_key`` again is a duplicate; with another
    body, IdempotencyMismatch. ``strategy`` acts on a slice running in this process.
    ``media``: images and files sent beside the body (a multipart upload's, on disk),
    ``fingerprint`` then the request's (its fields and its files' digests)."""
    inner = scope.inner(thread_id)
    check_size(rt, body.content)
    if body.strategy == "reject" and rt.scheduler.running(inner):
        raise Busy(f"thread {thread_id!r} is running")
    if quotas is not None:
        await quotas.admit(rt, inner, scope.tenant_id)
    # the sender's binding key, in the thread's tenant's memory (as Runtime.send(identity=))
    source = await (await rt.memory_for(inner)).bind(body.identity) if body.identity else None
    agent = agent_name(rt, body.agent)
    content, parts = (  # images and files: all checked, then stored, before the input
        await admit_parts(rt, inner, body.content, body.parts, agent) if body.parts else (body.content, ())
    )
    if media:
        items = [Text(body.content), *media]
        content, parts = await store_parts(
            rt.store, inner, items, Limits.of(rt.settings), agent, rt.extractor
        )
    item = NewInput(
        thread_id=inner,
        kind="user",
        dedup_key=f"{origin}:{dedup_key}" if dedup_key else f"auto:{uuid.uuid4().hex}",
        content=content,
        parts=parts,
        priority=Priority(body.priority),
        agent=agent,
        source=source,
        fingerprint=(fingerprint or body_fingerprint(body)) if dedup_key else None,
    )
    try:
        (admission,) = await rt.admit([item], tenant=scope.tenant_id)
    except IdempotencyMismatch:
        raise IdempotencyMismatch(
            f"the {'Idempotency-Key' if origin == 'http' else 'dedup key'} {dedup_key!r} was used with "
            f"a different request body on thread {thread_id!r}; send a new key for a new input"
        ) from None
    interrupted = False
    if body.strategy in ("interrupt", "rollback") and not admission.duplicate:
        interrupted = await rt.interrupt(inner)
        if interrupted and body.strategy == "rollback" and hub is not None:
            hub.rollback(inner)
    return AdmissionOut(
        input_id=admission.input_id,
        thread_id=thread_id,
        duplicate=admission.duplicate,
        interrupted=interrupted,
    )


async def message_page(
    rt: Runtime,
    scope: Scope,
    thread_id: str,
    *,
    cursor: str | None,
    limit: int,
    order: Literal["asc", "desc"] = "asc",
) -> MessagePage:
    """One page of the tenant's thread's messages, and what retention pruned of it."""
    inner = scope.inner(thread_id)
    page = await rt.history(
        inner, cursor=cursor, limit=limit, newest_first=order == "desc", tenant=scope.tenant_id
    )
    mark = await rt.store.retention_mark(inner, tenant=scope.tenant_id)
    pruned = None
    if mark is not None:
        pruned = PrunedOut(
            messages=mark.pruned, up_to_seq=mark.up_to_seq, policy=mark.policy, pruned_at=mark.pruned_at
        )
    items = [MessageOut.of(m) for m in page.items]
    return MessagePage(items=items, next_cursor=page.next_cursor, pruned=pruned)


async def thread_out(rt: Runtime, scope: Scope, thread_id: str) -> ThreadOut:
    """The tenant's thread's metadata (NotFound for another tenant's)."""
    return ThreadOut.of(await rt.thread(scope.inner(thread_id), tenant=scope.tenant_id), scope)


# -- long-term memory ------------------------------------------------------------------


async def memory_of(rt: Runtime, scope: Scope) -> Memory:
    """The runtime's memory as the tenant sees it."""
    return await rt.memory.for_tenant(scope.tenant_id)


async def subject_keys(memory: Memory, keys: list[str], identity: Identity | None) -> list[str]:
    """The binding keys a body names: its keys, or its identity parts bound."""
    return [await memory.bind(identity)] if identity is not None else list(keys)


def check_keys(keys: list[str]) -> None:
    """InvalidInput unless every key is a binding key."""
    for key in keys:
        if not _KEY.match(key):
            raise InvalidInput("subject: not a binding key")


async def add_memory(memory: Memory, body: MemoryAdd, *, actor: str) -> AddOut:
    """Store one memory of the body's subject durably."""
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
        actor=actor,
    )
    return AddOut.of(result)


async def recall_memory(memory: Memory, body: MemoryRecall) -> RecallOut:
    """The best ``k`` memories of the body's subject(s) for its query, best first."""
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


async def record_history(
    memory: Memory, keys: list[str], record_id: str, *, cursor: str | None, limit: int
) -> ChangePage:
    """One page of a record's changes, oldest first; NotFound for a record the tenant
    does not have under ``keys``."""
    check_keys(keys)
    await memory.get(keys, record_id)  # NotFound outside the tenant and subject
    page = await memory.history(keys, record_id=record_id, cursor=cursor, limit=limit)
    return ChangePage(items=[ChangeOut.of(c) for c in page.items], next_cursor=page.next_cursor)


async def forget_memory(memory: Memory, keys: list[str], record_id: str, *, reason: str, actor: str) -> None:
    """Invalidate one record of the subject (kept in its history); NotFound outside it."""
    check_keys(keys)
    await memory.get(keys, record_id)
    await memory.forget(keys, record_id, reason=reason, actor=actor)
