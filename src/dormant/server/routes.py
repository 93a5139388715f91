"""The native REST API (v1): threads, inputs, paged messages, tool results, retry, status.

Every route needs a tenant's bearer key and sees only that tenant's threads: ids are
mapped through the caller's :class:`~dormant.tenants.scope.Scope`, and every runtime and
store call carries the caller's tenant, which the store core enforces again. Another
tenant's id, cursor, call id or blob ref answers 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

import msgspec
from fastapi import APIRouter, Depends, Header, Path, Query, Request, Response

from ..memory.registers import SUBJECT_KEY
from ..runtime import Runtime
from ..store.base import MAX_PAGE
from ..tenants.scope import Scope
from ..tools.blobs import MAX_READ
from . import calls
from .calls import agent_name
from .multipart import FORM_DOC
from .schemas import (
    AdmissionOut,
    ErrorBody,
    InputCreate,
    MessagePage,
    RegistersOut,
    StatusOut,
    ThreadCreate,
    ThreadOut,
    ThreadPage,
    ToolResultIn,
)
from .state import state_of, tenant_scope
from .uploads import served_type

ERRORS: dict[int | str, dict[str, object]] = {
    code: {"model": ErrorBody} for code in (400, 401, 404, 409, 413, 422, 429, 503)
}

router = APIRouter(prefix="/v1", tags=["threads"], responses=ERRORS)

TenantScope = Annotated[Scope, Depends(tenant_scope)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE)]
IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="the dedup key: the same key on the same thread is admitted once",
    ),
]


def runtime_of(request: Request) -> Runtime:
    """The runtime the app hosts."""
    return state_of(request).runtime


def check_size(request: Request, content: str) -> None:
    """PayloadTooLarge (413) for content over the runtime's input limit."""
    calls.check_size(runtime_of(request), content)


@router.post("/threads", status_code=201, response_model=ThreadOut)
async def create_thread(request: Request, scope: TenantScope, body: ThreadCreate) -> ThreadOut:
    """Create a thread; an existing id is returned unchanged (so a retry is harmless)."""
    rt = runtime_of(request)
    thread_id = scope.inner(body.id or uuid.uuid4().hex)
    await state_of(request).quotas.check_new_thread(rt, thread_id, scope.tenant_id)
    state = None
    if body.identity:  # the subject at creation, in the thread's tenant's memory
        key = await (await rt.memory_for(thread_id)).bind(body.identity)
        state = {SUBJECT_KEY: msgspec.json.encode(key).decode()}
    thread = await rt.store.create_thread(
        thread_id, agent_name(rt, body.agent), tenant=scope.tenant_id, state=state
    )
    return ThreadOut.of(thread, scope)


@router.get("/threads", response_model=ThreadPage)
async def list_threads(
    request: Request, scope: TenantScope, cursor: str | None = None, limit: Limit = 50
) -> ThreadPage:
    """One page of the tenant's threads, by id."""
    page = await runtime_of(request).threads(
        cursor=scope.list_cursor(cursor), limit=limit, tenant=scope.tenant_id
    )
    items = scope.page(page.items)
    next_cursor = scope.outer(page.next_cursor) if page.next_cursor else None
    return ThreadPage(items=[ThreadOut.of(t, scope) for t in items], next_cursor=next_cursor)


@router.get("/threads/{thread_id}", response_model=ThreadOut)
async def get_thread(request: Request, scope: TenantScope, thread_id: str) -> ThreadOut:
    """One thread's metadata."""
    return await calls.thread_out(runtime_of(request), scope, thread_id)


@router.get("/threads/{thread_id}/registers", response_model=RegistersOut)
async def get_registers(request: Request, scope: TenantScope, thread_id: str) -> RegistersOut:
    """A thread's short-term register and its subject's long-term register, as committed."""
    rt = runtime_of(request)
    inner = scope.inner(thread_id)
    await rt.thread(inner, tenant=scope.tenant_id)  # another tenant's thread: 404
    return RegistersOut(**await rt.registers(inner))


@router.delete("/threads/{thread_id}", status_code=204, response_class=Response)
async def delete_thread(request: Request, scope: TenantScope, thread_id: str) -> Response:
    """Delete a thread, its descendants and their histories (refused, 422, while one runs a slice)."""
    await runtime_of(request).delete_thread(scope.inner(thread_id), tenant=scope.tenant_id)
    return Response(status_code=204)


@router.post(
    "/threads/{thread_id}/inputs",
    status_code=202,
    response_model=AdmissionOut,
    openapi_extra=FORM_DOC,  # the same path takes multipart/form-data (upload_routes)
)
async def post_input(
    request: Request,
    scope: TenantScope,
    thread_id: str,
    body: InputCreate,
    idempotency_key: IdempotencyKey = None,
) -> AdmissionOut:
    """Admit user text; 202 once durable. The thread is created (with ``agent``) if new.

    While the thread runs a slice in this process, ``strategy`` decides: ``enqueue``
    waits behind it, ``reject`` answers 409 (admitting nothing), ``interrupt`` admits
    then cancels the slice (it commits nothing; its inputs run again with this one),
    ``rollback`` does the same and tells event streams to discard its live text.
    The same ``Idempotency-Key`` again is a duplicate (202, ``duplicate: true``, nothing
    written); with a different body it is refused, 422 ``idempotency_mismatch``.
    A slice running in another process (``--workers N``) is not reached: the input
    is queued and ``interrupted`` is false.
    """
    state = state_of(request)
    return await calls.send_input(
        state.runtime,
        scope,
        thread_id,
        body,
        dedup_key=idempotency_key,
        quotas=state.quotas,
        hub=state.hub,
    )


@router.get("/threads/{thread_id}/messages", response_model=MessagePage)
async def list_messages(
    request: Request,
    scope: TenantScope,
    thread_id: str,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,18}$")] = None,
    limit: Limit = 50,
    order: Literal["asc", "desc"] = "asc",
) -> MessagePage:
    """One page of the thread's messages, oldest first (``asc``) or newest first (``desc``);
    ``pruned``: what a retention policy deleted of its history (null: nothing)."""
    return await calls.message_page(
        runtime_of(request), scope, thread_id, cursor=cursor, limit=limit, order=order
    )


@router.post("/threads/{thread_id}/tool_results/{call_id}", status_code=202, response_model=AdmissionOut)
async def post_tool_result(
    request: Request, scope: TenantScope, thread_id: str, call_id: str, body: ToolResultIn
) -> AdmissionOut:
    """Answer an open async tool call of the thread; the first answer wins (later: duplicate)."""
    check_size(request, body.content)
    rt = runtime_of(request)
    admission = await rt.post_tool_result(
        scope.inner(thread_id), call_id, body.content, is_error=body.is_error, tenant=scope.tenant_id
    )
    return AdmissionOut(input_id=admission.input_id, thread_id=thread_id, duplicate=admission.duplicate)


@router.get(
    "/threads/{thread_id}/blobs/{ref}",
    response_class=Response,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the bytes"}},
)
async def read_blob(
    request: Request,
    scope: TenantScope,
    thread_id: str,
    ref: Annotated[str, Path(pattern=r"^sha256:[0-9a-f]{64}$")],
    offset: Annotated[int, Query(ge=0, le=2**62)] = 0,
    length: Annotated[int, Query(ge=1, le=MAX_READ)] = MAX_READ,
) -> Response:
    """Bytes of a blob the thread (or an ancestor) refers to: a large tool output stored
    whole, of which the thread's messages show an excerpt and the ref. ``X-Blob-Size``
    is its size; a read past the end is empty. An image or PDF part (validated when it
    was admitted) is served with its media type, anything else as
    ``application/octet-stream``, always with ``X-Content-Type-Options: nosniff``."""
    store = runtime_of(request).store
    inner = scope.inner(thread_id)
    blob = await store.get_blob(inner, ref, tenant=scope.tenant_id)
    data = await store.read_blob(inner, ref, offset, length, tenant=scope.tenant_id)
    head = data if offset == 0 else await store.read_blob(inner, ref, 0, 16, tenant=scope.tenant_id)
    headers = {"X-Blob-Size": str(blob.size), "X-Content-Type-Options": "nosniff"}
    return Response(data, media_type=served_type(head), headers=headers)


@router.post("/threads/{thread_id}/retry", response_model=ThreadOut)
async def retry_thread(request: Request, scope: TenantScope, thread_id: str) -> ThreadOut:
    """Make a failed thread run again."""
    thread = await runtime_of(request).retry(scope.inner(thread_id), tenant=scope.tenant_id)
    return ThreadOut.of(thread, scope)


@router.get("/status", response_model=StatusOut, tags=["status"])
async def status(request: Request, scope: TenantScope) -> StatusOut:
    """The caller's tenant's counts: its threads (children included), their backlog, calls
    and messages. Nothing of another tenant, not even store-wide totals."""
    return StatusOut.of(await runtime_of(request).status(scope.tenant_id))
