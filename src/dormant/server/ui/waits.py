"""The dashboard's Approvals page and its decisions: open approvals and ``ask_user``
questions, paged and filtered (tenant for the operator, thread, tool, age), with
approve / deny (with a reason) / edit (JSON arguments, checked against the tool's
schema) for a call and an answer form for a question.

A decision goes through :meth:`Runtime.decide` / :meth:`Runtime.answer` (the one way
to decide, as REST and the CLI do), in the viewer's tenant (another tenant's wait is
404), with ``by=`` the viewer (``operator``, or ``tenant:<id> key:<key id>``) and the form's own
decision key: a form submitted twice decides once, and a different decision on a
decided wait shows the first one (409). Every decision is a CSRF-checked form POST,
audited (``ui_action``) before it is answered.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.parse

from fastapi import APIRouter, Request
from fastapi.responses import RedirectResponse, Response

from ...approvals import question_of
from ...errors import DecisionConflict, InvalidInput, NotFound
from ...records import Approval
from ..state import state_of
from .auth import Viewer
from .pages import HEADERS, audit, env, form_of, guarded, page, stored_thread_id, viewer_of

router = APIRouter(prefix="/ui", include_in_schema=False)

#: Waits shown per page.
PAGE = 50
#: Age filters: seconds a wait has waited at least.
AGES = {"": 0.0, "1m": 60.0, "10m": 600.0, "1h": 3600.0, "1d": 86400.0}
OPEN = ("requested", "escalated")


def form_key() -> str:
    """A fresh decision key for one rendered form (its double submit decides once)."""
    return "ui:" + secrets.token_urlsafe(12)


def is_open(wait: Approval) -> bool:
    """Whether ``wait`` still waits for a decision or an answer."""
    return wait.status in OPEN


env.globals["form_key"] = form_key
env.globals["question_of"] = question_of
env.globals["is_open"] = is_open


def who(viewer: Viewer) -> str:
    """The decider a viewer's decisions name: ``operator``, or ``tenant:<id>`` and the
    id of the key it logged in with (``tenant:<id> key:<key id>``)."""
    if viewer.operator:
        return "operator"
    return f"tenant:{viewer.tenant}" + (f" key:{viewer.key}" if viewer.key else "")


def _back(fields: dict[str, str], thread_id: str) -> str:
    if fields.get("back") == "thread":
        return "/ui/thread?" + urllib.parse.urlencode({"id": thread_id})
    return "/ui/approvals"


@router.get("/approvals")
@guarded("approvals")
async def approvals(request: Request) -> Response:
    """Open approvals and questions, oldest first, paged, filtered."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    q = request.query_params
    tenant = viewer.tenant
    chosen = ""
    if viewer.operator and q.get("tenant"):
        chosen = q["tenant"][:200]
        tenant = (await rt.store.tenant(chosen)).id
    thread = q.get("thread", "").strip()[:300]
    tool = q.get("tool", "").strip()[:200]
    age = q.get("age", "") if q.get("age", "") in AGES else ""
    cursor = q.get("cursor") or None
    if cursor is not None and not (cursor.isdigit() and len(cursor) < 19):
        cursor = None
    listing = await rt.pending(
        tenant=tenant,
        thread_id=_scoped(viewer, thread) if thread else None,
        tool=tool or None,
        older_than_s=AGES[age],
        cursor=cursor,
        limit=PAGE,
    )
    base = {"tenant": chosen, "thread": thread, "tool": tool, "age": age}
    next_url = None
    if listing.next_cursor:
        next_url = "/ui/approvals?" + urllib.parse.urlencode({**base, "cursor": listing.next_cursor})
    tenants = (await rt.store.list_tenants(limit=100)).items if viewer.operator else []
    return page(
        request,
        viewer,
        "approvals.html",
        waits=listing.items,
        filters=base,
        chosen=chosen,
        tenants=tenants,
        ages=list(AGES),
        next_url=next_url,
        first=cursor is None,
        now=time.time(),
        nav="approvals",
    )


def _scoped(viewer: Viewer, raw: str) -> str:
    """The stored id of a thread a form names: an id outside the viewer's tenant is no
    thread of theirs (404, never a hint it exists)."""
    try:
        return stored_thread_id(viewer, raw)
    except InvalidInput:
        raise NotFound("no such approval or question") from None


def _call(fields: dict[str, str]) -> str:
    call = fields.get("call", "")
    if not call or len(call) > 200:
        raise NotFound("no such approval or question")
    return call


def _conflict(request: Request, viewer: Viewer, exc: DecisionConflict) -> Response:
    first = exc.first if isinstance(exc.first, Approval) else None
    return page(request, viewer, "error.html", status=409, message=str(exc)[:500], first=first)


@router.post("/approvals/decide")
@guarded("decide_approval")
async def decide(request: Request) -> Response:
    """Approve, deny (with a reason) or edit (JSON arguments) a call waiting for approval."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    rt = state_of(request).runtime
    thread_id = _scoped(viewer, fields.get("thread", ""))
    call = _call(fields)
    action = fields.get("action", "")
    note = fields.get("note", "").strip() or None
    args = None
    if action == "edit":
        try:
            args = json.loads(fields.get("args", ""))
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the edited arguments are not JSON: {exc}") from None
        if not isinstance(args, dict):
            raise InvalidInput("the edited arguments are a JSON object")
    key = fields.get("key") or None
    try:
        row = await rt.decide(
            thread_id,
            call,
            action,
            args=args,
            note=note,
            by=who(viewer),
            key=key,
            role=fields.get("role", "").strip() or None,
            tenant=viewer.tenant,
        )
    except DecisionConflict as exc:
        return _conflict(request, viewer, exc)
    audit(
        viewer,
        "decide_approval",
        thread_id,
        call=call,
        decision=action,
        status=row.status,
        note=note,
        by=row.decided_by,
        decision_key=key,
    )
    return RedirectResponse(_back(fields, thread_id), status_code=303, headers=HEADERS)


@router.post("/approvals/answer")
@guarded("answer_question")
async def answer(request: Request) -> Response:
    """Answer an open question (one of its choices, or free text when it has none)."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    rt = state_of(request).runtime
    thread_id = _scoped(viewer, fields.get("thread", ""))
    call = _call(fields)
    key = fields.get("key") or None
    text = fields.get("text", "")
    try:
        row = await rt.answer(thread_id, call, text, by=who(viewer), key=key, tenant=viewer.tenant)
    except DecisionConflict as exc:
        return _conflict(request, viewer, exc)
    audit(
        viewer,
        "answer_question",
        thread_id,
        call=call,
        status=row.status,
        answer=text[:500],
        by=row.decided_by,
        decision_key=key,
    )
    return RedirectResponse(_back(fields, thread_id), status_code=303, headers=HEADERS)
