"""The dashboard's routes under ``/ui``: login, overview, threads, a thread, failures.

Pages are rendered on the server (Jinja2, every value escaped) and ship with one
stylesheet and one script of the package's own (``/ui/static``), under a strict
Content-Security-Policy: no inline script or style, nothing from another origin.
The only writes are POSTs of forms carrying the session's CSRF token; each is logged
as a ``ui_action`` record (who, what, which thread) before it is answered.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
import urllib.parse
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape

from ...errors import DormantError, InvalidInput, NotFound, UsageError, http_status
from ...parts.media import IMAGE_TYPES
from ...tenants.keys import parse_key
from ...tenants.scope import Scope, tenant_of
from ..state import ServerState, state_of
from . import data
from .auth import COOKIE, Sessions, Viewer, same_origin

log = logging.getLogger("dormant.server.ui")

router = APIRouter(prefix="/ui", include_in_schema=False)

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",  # "no-referrer" makes Chromium send Origin: null on POST
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}
STATIC = {"dashboard.js": "text/javascript", "dashboard.css": "text/css"}
#: Media types a blob is drawn (and served) inline as: images; everything else is a link
#: to an attachment.
INLINE = frozenset(IMAGE_TYPES.values())
#: Bytes of a dashboard form at most.
MAX_FORM = 8192


def _when(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S") if t else "-"


env = Environment(
    loader=PackageLoader("dormant.server.ui", "templates"), autoescape=select_autoescape(default=True)
)
env.filters["when"] = _when
env.filters["bytes"] = data.size_text
env.globals["thumb_size"] = data.thumb_size
env.globals["inline_types"] = INLINE


class Redirect(Exception):
    """Answer with a redirect to ``to`` (to the login page when no session)."""

    def __init__(self, to: str) -> None:
        self.to = to


class Forbidden(UsageError):
    """A dashboard POST refused: another site, or no valid CSRF token (403)."""


def sessions_of(st: ServerState) -> Sessions:
    """The app's session signer."""
    s = st.ui_sessions
    assert isinstance(s, Sessions)
    return s


def viewer_of(request: Request) -> Viewer:
    """The logged-in viewer, or a redirect to the login page."""
    viewer = sessions_of(state_of(request)).check(request.cookies.get(COOKIE))
    if viewer is None:
        raise Redirect("/ui/login")
    return viewer


def shown_id(viewer: Viewer, thread_id: str) -> str:
    """A stored thread id as the viewer knows it (a tenant: without its prefix)."""
    return Scope(viewer.tenant).outer(thread_id) if viewer.tenant else thread_id


def page(
    request: Request, viewer: Viewer | None, name: str, status: int = 200, **values: Any
) -> HTMLResponse:
    """A rendered page with the dashboard's security headers."""
    sessions = sessions_of(state_of(request))
    html = env.get_template(name).render(
        viewer=viewer,
        csrf=sessions.csrf(viewer) if viewer else "",
        shown_id=lambda i: shown_id(viewer, i) if viewer else i,
        **values,
    )
    return HTMLResponse(html, status_code=status, headers=HEADERS)


Handler = Callable[[Request], Awaitable[Response]]


def guarded(name: str) -> Callable[[Handler], Handler]:
    """Decorate a page handler: redirects and store errors become pages."""

    def wrap(fn: Handler) -> Handler:
        async def handler(request: Request) -> Response:
            try:
                return await fn(request)
            except Redirect as r:
                return RedirectResponse(r.to, status_code=303, headers=HEADERS)
            except DormantError as exc:
                viewer = sessions_of(state_of(request)).check(request.cookies.get(COOKIE))
                code = 403 if isinstance(exc, Forbidden) else http_status(exc)
                return page(request, viewer, "error.html", status=code, message=str(exc)[:500])

        handler.__name__ = name
        return handler

    return wrap


async def form_of(request: Request, viewer: Viewer | None) -> dict[str, str]:
    """A POSTed form (bounded), refused (403) from another site or without the session's
    CSRF token."""
    if not same_origin(request.headers.get("origin"), request.headers.get("host")):
        raise Forbidden("cross-site request refused")
    raw = await request.body()
    if len(raw) > MAX_FORM:
        raise Forbidden("form too large")
    fields = {k: v[0] for k, v in urllib.parse.parse_qs(raw.decode(errors="replace")).items()}
    if viewer is not None and not sessions_of(state_of(request)).csrf_ok(viewer, fields.get("csrf")):
        raise Forbidden("missing or wrong CSRF token")
    return fields


def audit(viewer: Viewer, action: str, target: str, **facts: object) -> None:
    """The audit record of one dashboard action."""
    who = "operator" if viewer.operator else f"tenant:{viewer.tenant}"
    log.info("ui_action", extra={"who": who, "action": action, "target": target, **facts})


@router.get("")
@router.get("/")
async def root() -> Response:
    """The overview."""
    return RedirectResponse("/ui/overview", status_code=303, headers=HEADERS)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    """One of the dashboard's own assets."""
    if name not in STATIC:
        raise NotFound(f"no asset {name!r}")
    body = resources.files("dormant.server.ui").joinpath("static", name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={**HEADERS, "Cache-Control": "max-age=300"})


@router.get("/login")
@guarded("login_form")
async def login_form(request: Request) -> Response:
    """The login form."""
    return page(request, None, "login.html")


@router.post("/login")
@guarded("login")
async def login(request: Request) -> Response:
    """Log in with the operator token or a tenant's API key; a session cookie on success."""
    st = state_of(request)
    fields = await form_of(request, None)
    token = fields.get("token", "").strip()
    tenant: str | None
    key_id: str | None = None
    admin = st.config.admin_token
    if admin and hmac.compare_digest(token.encode(), admin.encode()):
        tenant = None
    else:
        try:
            tenant = (await st.runtime.store.authenticate(token)).id if token else ""
            key_id = parse_key(token)[0] if tenant else None
        except DormantError:
            tenant = ""
        if not tenant:
            log.info("ui_login_refused", extra={"client": request.client.host if request.client else None})
            return page(request, None, "login.html", status=401, message="That token is not valid.")
    viewer_cookie = sessions_of(st).issue(tenant, key=key_id)
    response = RedirectResponse("/ui/overview", status_code=303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        viewer_cookie,
        max_age=int(sessions_of(st).ttl_s),
        path="/ui",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
@guarded("logout")
async def logout(request: Request) -> Response:
    """End the session."""
    await form_of(request, viewer_of(request))
    response = RedirectResponse("/ui/login", status_code=303, headers=HEADERS)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.get("/overview")
@guarded("overview")
async def overview(request: Request) -> Response:
    """Figures now, and (for the operator) the last hour's charts, drawn by the page's script."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    status = await rt.status(viewer.tenant)
    waits, oldest = await rt.store.open_approvals(tenant=viewer.tenant)
    return page(
        request,
        viewer,
        "overview.html",
        status_counts=status,
        waits_open=waits,
        waits_oldest_s=None if oldest is None else max(0.0, rt.clock() - oldest),
        nav="overview",
    )


@router.get("/api/samples")
@guarded("samples")
async def samples(request: Request) -> Response:
    """The ring's samples after ``since`` (operator only: they are process- and store-wide)."""
    viewer = viewer_of(request)
    if not viewer.operator:
        raise NotFound("process figures are the operator's")
    try:
        since = float(request.query_params.get("since", "0"))
    except ValueError:
        since = 0.0
    sampler = state_of(request).ui_sampler
    rows = [] if sampler is None else sampler.since(since)
    import msgspec

    return Response(
        msgspec.json.encode({"samples": rows, "every_s": sampler.every_s if sampler else 0}),
        media_type="application/json",
        headers=HEADERS,
    )


def stored_thread_id(viewer: Viewer, raw: str) -> str:
    """The stored id of a thread id typed or linked (a tenant's: in its scope)."""
    raw = raw.strip()
    if viewer.tenant is None:
        if not raw or len(raw) > 300:
            raise NotFound("no such thread")
        return raw
    if raw.startswith(viewer.tenant + "/"):
        return raw
    return Scope(viewer.tenant).inner(raw)


@router.get("/threads")
@guarded("threads")
async def threads(request: Request) -> Response:
    """Threads, paged by id, filtered (tenant for the operator, agent, state, last activity)."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    q = request.query_params
    if q.get("id"):
        return RedirectResponse(
            "/ui/thread?" + urllib.parse.urlencode({"id": stored_thread_id(viewer, q["id"])}),
            status_code=303,
            headers=HEADERS,
        )
    state = q.get("state", "")
    filters = data.Filters(
        agent=q.get("agent", "")[:200],
        state=state if state in data.STATES else "",
        active=q.get("active", "") if q.get("active", "") in data.ACTIVITY else "",
    )
    tenant = viewer.tenant
    chosen = ""
    if viewer.operator and q.get("tenant"):
        chosen = q["tenant"][:200]
        tenant = (await rt.store.tenant(chosen)).id
    cursor = q.get("cursor") or None
    if filters.state == "person":  # the cursor is a wait's
        cursor = cursor if cursor and cursor.isdigit() and len(cursor) < 19 else None
    elif cursor is not None and tenant is not None and tenant_of(cursor) != tenant:
        cursor = None
    listing = await data.list_threads(rt, tenant=tenant, cursor=cursor, filters=filters)
    base = {"tenant": chosen, "agent": filters.agent, "state": filters.state, "active": filters.active}
    next_url = None
    if listing.next_cursor:
        next_url = "/ui/threads?" + urllib.parse.urlencode({**base, "cursor": listing.next_cursor})
    tenants = (await rt.store.list_tenants(limit=100)).items if viewer.operator else []
    return page(
        request,
        viewer,
        "threads.html",
        listing=listing,
        filters=filters,
        chosen=chosen,
        tenants=tenants,
        agents=sorted(rt.agents)[:100],
        states=data.STATES,
        activity=list(data.ACTIVITY),
        next_url=next_url,
        first=cursor is None,
        state_of=(lambda _: "person") if filters.state == "person" else data.state_of,
        nav="threads",
    )


@router.get("/thread")
@guarded("thread")
async def thread(request: Request) -> Response:
    """One thread: its row, registers, and one page of its timeline, newest first."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    thread_id = stored_thread_id(viewer, request.query_params.get("id", ""))
    row = await rt.thread(thread_id, tenant=viewer.tenant)
    cursor = request.query_params.get("cursor") or None
    if cursor is not None and not (cursor.isdigit() and len(cursor) < 19):
        cursor = None
    tl = await data.timeline(rt, thread_id, tenant=viewer.tenant, cursor=cursor)
    registers = await rt.registers(thread_id)
    next_url = None
    if tl.next_cursor:
        next_url = "/ui/thread?" + urllib.parse.urlencode({"id": thread_id, "cursor": tl.next_cursor})
    jcursor = request.query_params.get("jcursor") or None
    if jcursor is not None and not (jcursor.isdigit() and len(jcursor) < 19):
        jcursor = None
    journal = await rt.store.journal.entries(thread_id, cursor=jcursor, limit=data.PAGE)
    journal_url = None
    if journal.next_cursor:
        journal_url = "/ui/thread?" + urllib.parse.urlencode(
            {"id": thread_id, "jcursor": journal.next_cursor}
        )
    return page(
        request,
        viewer,
        "thread.html",
        thread=row,
        timeline=tl,
        next_url=next_url,
        journal=journal.items,
        journal_url=journal_url,
        registers=json.dumps(registers, indent=1, ensure_ascii=False, default=str)[:20000],
        first=cursor is None,
        state=await data.live_state(rt, row),
        nav="threads",
    )


@router.get("/api/thread")
@guarded("thread_head")
async def thread_head(request: Request) -> Response:
    """A thread's newest seq and state: the page's script reloads when they change."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    row = await rt.thread(stored_thread_id(viewer, request.query_params.get("id", "")), tenant=viewer.tenant)
    return JSONResponse(
        {"last_seq": row.last_seq, "state": await data.live_state(rt, row), "updated_at": row.updated_at},
        headers=HEADERS,
    )


@router.post("/thread/retry")
@guarded("retry")
async def retry(request: Request) -> Response:
    """Make a failed thread run again (audited)."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    rt = state_of(request).runtime
    thread_id = stored_thread_id(viewer, fields.get("id", ""))
    await rt.retry(thread_id, tenant=viewer.tenant)
    audit(viewer, "retry_thread", thread_id)
    back = fields.get("back", "thread")
    to = "/ui/failures" if back == "failures" else "/ui/thread?" + urllib.parse.urlencode({"id": thread_id})
    return RedirectResponse(to, status_code=303, headers=HEADERS)


#: Characters of a resolution note at most.
MAX_NOTE = 500


@router.post("/calls/resolve")
@guarded("resolve_call")
async def resolve_call(request: Request) -> Response:
    """Mark a dead-lettered or outcome-unknown call resolved, with a note: it leaves the
    outbox (its result is already in its thread); the audit record keeps what it was."""
    viewer = viewer_of(request)
    fields = await form_of(request, viewer)
    note = " ".join(fields.get("note", "").split())
    if not note or len(note) > MAX_NOTE:
        raise InvalidInput(f"a resolution needs a note of 1-{MAX_NOTE} characters")
    raw = fields.get("entry", "")
    if not (raw.isdigit() and len(raw) < 19):
        raise NotFound("no such call")
    entry = await state_of(request).runtime.store.resolve_call(int(raw), tenant=viewer.tenant)
    audit(
        viewer,
        "resolve_call",
        entry.thread_id,
        call=entry.call_id,
        tool=entry.tool,
        status=entry.status,
        attempts=entry.attempts,
        last_error=entry.last_error,
        note=note,
    )
    return RedirectResponse("/ui/failures", status_code=303, headers=HEADERS)


@router.get("/failures")
@guarded("failures")
async def failures(request: Request) -> Response:
    """Failed threads, dead-lettered calls and calls whose outcome is unknown, each paged."""
    viewer = viewer_of(request)
    rt = state_of(request).runtime
    q = request.query_params
    cursor = q.get("cursor") or None
    if cursor is not None and viewer.tenant is not None and tenant_of(cursor) != viewer.tenant:
        cursor = None
    failed = await data.list_threads(
        rt, tenant=viewer.tenant, cursor=cursor, filters=data.Filters(state="failed")
    )
    dead = await data.failed_calls(rt, status="dead", tenant=viewer.tenant, cursor=q.get("dead") or None)
    unknown = await data.failed_calls(
        rt, status="unknown", tenant=viewer.tenant, cursor=q.get("unknown") or None
    )
    links = {
        name: "/ui/failures?" + urllib.parse.urlencode({**{k: v for k, v in q.items() if k != name}, name: c})
        for name, c in (
            ("cursor", failed.next_cursor),
            ("dead", dead.next_cursor),
            ("unknown", unknown.next_cursor),
        )
        if c
    }
    return page(
        request,
        viewer,
        "failures.html",
        failed=failed,
        dead=dead,
        unknown=unknown,
        links=links,
        now=time.time(),
        nav="failures",
    )
