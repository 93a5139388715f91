"""Waits for a person over REST (v1): list the open approvals and questions (paged),
decide a call, answer a question. Tenant-scoped like every route: another tenant's
thread or call id answers 404. The routes call :meth:`Runtime.decide` and
:meth:`Runtime.answer`, the one way to decide (the dashboard calls them too)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from ..approvals import MAX_ANSWER, MAX_NOTE, question_of
from ..errors import DecisionConflict, http_status
from ..records import Approval
from ..tenants.scope import Scope
from .problems import body
from .routes import ERRORS, Limit, TenantScope, runtime_of
from .schemas import Body

router = APIRouter(prefix="/v1", tags=["approvals"], responses=ERRORS)


class ApprovalOut(BaseModel):
    """A wait for a person: a call awaiting approval (``kind`` approval) or an
    ``ask_user`` question (``kind`` question, with its ``question`` and ``choices``)."""

    thread_id: str
    call_id: str
    kind: str
    tool: str
    arguments: str = Field(description="as the model gave them")
    status: str = Field(description="requested, escalated, approved, edited, denied, expired or answered")
    role: str | None
    deadline: float | None = Field(description="Unix time it expires; null: open until acted on")
    decided_by: str | None
    decision_key: str | None
    note: str | None
    decided_arguments: str | None = Field(description="the arguments that ran (an edit's)")
    requested_at: float
    decided_at: float | None
    question: str | None = None
    choices: list[str] | None = None

    @classmethod
    def of(cls, a: Approval, scope: Scope) -> ApprovalOut:
        question, choices = question_of(a) if a.kind == "question" else (None, None)
        return cls(
            thread_id=scope.outer(a.thread_id),
            call_id=a.call_id,
            kind=a.kind,
            tool=a.tool,
            arguments=a.arguments,
            status=a.status,
            role=a.role,
            deadline=a.deadline or None,
            decided_by=a.decided_by,
            decision_key=a.decision_key,
            note=a.note,
            decided_arguments=a.decided_arguments,
            requested_at=a.requested_at,
            decided_at=a.decided_at,
            question=question,
            choices=choices,
        )


class ApprovalPage(BaseModel):
    """One page of waits, oldest first; pass ``next_cursor`` back as ``cursor``."""

    items: list[ApprovalOut]
    next_cursor: str | None


class DecisionIn(Body):
    """A decision on a call awaiting approval."""

    action: Literal["approve", "deny", "edit"]
    args: dict[str, Any] | None = Field(None, description="edit only: the arguments to run instead")
    note: str | None = Field(None, max_length=MAX_NOTE, description="why (the model sees a denial's)")
    by: str | None = Field(None, max_length=200, description="who decides")
    key: str | None = Field(None, max_length=200, description="the decision's idempotency key")
    role: str | None = Field(None, max_length=200, description="the decider's role, when the wait names one")


class AnswerIn(Body):
    """The answer to an ``ask_user`` question."""

    text: str = Field(max_length=MAX_ANSWER)
    by: str | None = Field(None, max_length=200)
    key: str | None = Field(None, max_length=200)


def conflict(exc: DecisionConflict, scope: Scope) -> JSONResponse:
    """409 with the first decision beside the error."""
    content: dict[str, Any] = body(exc.code, str(exc))
    if isinstance(exc.first, Approval):
        content["first"] = ApprovalOut.of(exc.first, scope).model_dump()
    return JSONResponse(content, status_code=http_status(exc))


@router.get("/approvals", response_model=ApprovalPage)
async def list_approvals(
    request: Request,
    scope: TenantScope,
    status: Annotated[str, Query(description="open (default), all, or one status")] = "open",
    thread_id: str | None = None,
    tool: Annotated[str | None, Query(max_length=200)] = None,
    older_than_s: Annotated[float, Query(ge=0)] = 0.0,
    cursor: Annotated[str | None, Query(max_length=40)] = None,
    limit: Limit = 100,
) -> ApprovalPage:
    """The caller's waits for a person, oldest first."""
    page = await runtime_of(request).pending(
        tenant=scope.tenant_id,
        thread_id=scope.inner(thread_id) if thread_id is not None else None,
        tool=tool,
        older_than_s=older_than_s,
        status=status,
        cursor=cursor,
        limit=limit,
    )
    return ApprovalPage(items=[ApprovalOut.of(a, scope) for a in page.items], next_cursor=page.next_cursor)


@router.get("/threads/{thread_id}/approvals/{call_id}", response_model=ApprovalOut)
async def get_approval(request: Request, scope: TenantScope, thread_id: str, call_id: str) -> ApprovalOut:
    """One wait of the thread (open or decided)."""
    found = await runtime_of(request).approval(scope.inner(thread_id), call_id, tenant=scope.tenant_id)
    return ApprovalOut.of(found, scope)


@router.post("/threads/{thread_id}/approvals/{call_id}", response_model=ApprovalOut)
async def decide(
    request: Request, scope: TenantScope, thread_id: str, call_id: str, body_: DecisionIn
) -> ApprovalOut | JSONResponse:
    """Approve, edit or deny a call awaiting approval; durable before the answer. The
    same decision again (same key) answers the first; a different one is 409 with it."""
    try:
        row = await runtime_of(request).decide(
            scope.inner(thread_id),
            call_id,
            body_.action,
            args=body_.args,
            note=body_.note,
            by=body_.by,
            key=body_.key,
            role=body_.role,
            tenant=scope.tenant_id,
        )
    except DecisionConflict as exc:
        return conflict(exc, scope)
    return ApprovalOut.of(row, scope)


@router.post("/threads/{thread_id}/answers/{question_id}", response_model=ApprovalOut)
async def answer(
    request: Request, scope: TenantScope, thread_id: str, question_id: str, body_: AnswerIn
) -> ApprovalOut | JSONResponse:
    """Answer an open ``ask_user`` question (one of its choices when it has some)."""
    try:
        row = await runtime_of(request).answer(
            scope.inner(thread_id),
            question_id,
            body_.text,
            by=body_.by,
            key=body_.key,
            tenant=scope.tenant_id,
        )
    except DecisionConflict as exc:
        return conflict(exc, scope)
    return ApprovalOut.of(row, scope)
