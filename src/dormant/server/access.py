"""Access log, request ids and HTTP request metrics of ``dormant serve``.

:class:`AccessLog` is plain ASGI middleware, the outermost of the app's own. For every
HTTP request it

* takes the client's ``X-Request-Id`` (1-128 characters of ``A-Z a-z 0-9 . _ : + / = @ -``;
  anything else is refused with 422 ``invalid_input``) or makes one (32 hex digits),
  echoes it on the response and binds it (``request_id``) to every log record written
  while the request runs (:func:`dormant.logs.bind`);
* writes one ``http_request`` record at info level on the ``dormant.server.access``
  logger when the response ends (for an event stream: when the stream ends), with
  ``method``, ``route`` (the route template, such as ``/v1/threads/{thread_id}/inputs``,
  never the raw path or its query string, so no id or ``?token=`` reaches the log),
  ``tenant`` (the tenant id, once the caller authenticated), ``status``, ``ms`` and
  ``request_id``; the text and JSON log formats both carry them;
* counts it in ``dormant_http_requests_total{route,method,status}`` and observes its
  latency in ``dormant_http_request_duration_seconds{route,method}`` on the app's
  ``/metrics``.

Label values are bounded whatever a client sends: ``route`` is one of the app's route
templates or ``unmatched``, ``method`` one of the HTTP methods the app knows or
``other``, ``status`` a three-digit code. RAM: nothing is kept per request beyond the
request itself, and the metric series are bounded by the product of routes, methods and statuses.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import logs
from ..errors import InvalidInput
from ..ops.exporter import BUCKETS
from .problems import error_response

log = logging.getLogger("dormant.server.access")

#: The request header a client may name its request by (and the response header echoing it).
HEADER = "X-Request-Id"
#: What a client's request id may hold: printable, no spaces, no quotes, bounded.
REQUEST_ID_PATTERN = r"^[A-Za-z0-9._:+/=@-]{1,128}$"
_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)
_HEADER_KEY = HEADER.lower().encode()
#: Methods that keep their name as a label; anything else is ``other``.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
#: The route label of a request no route matched.
UNMATCHED = "unmatched"
#: Where the request's facts live in its ASGI scope (a handler adds the tenant).
SCOPE_KEY = "dormant.access"


@dataclass
class RequestFacts:
    """What the access log line says of one request (the tenant is set once known)."""

    request_id: str
    tenant: str | None = None


def request_id_of(value: bytes | None) -> str:
    """The request id a client sent (validated), or a new one when it sent none.

    InvalidInput (422) for an id that is empty, longer than 128 characters or holds
    anything outside ``A-Z a-z 0-9 . _ : + / = @ -``.
    """
    if value is None:
        return uuid.uuid4().hex
    text = value.decode("latin-1")
    if not _REQUEST_ID.match(text):
        raise InvalidInput(
            f"{HEADER} must be 1-128 characters of A-Z a-z 0-9 . _ : + / = @ - (got {len(text)} characters)"
        )
    return text


def note_tenant(request: Request, tenant_id: str) -> None:
    """Record the caller's tenant for the request's access log line."""
    facts = request.scope.get(SCOPE_KEY)
    if isinstance(facts, RequestFacts):
        facts.tenant = tenant_id


class HttpMetrics:
    """The HTTP request counter and latency histogram, in the exporter's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "dormant_http_requests",
            "HTTP requests answered, by route template, method and status.",
            ("route", "method", "status"),
            registry=registry,
        )
        self.seconds = Histogram(
            "dormant_http_request_duration_seconds",
            "Time from a request's arrival to the end of its response, by route template "
            "and method (an event stream counts until it ends).",
            ("route", "method"),
            buckets=BUCKETS,
            registry=registry,
        )
        self.refused = Counter(
            "dormant_http_connections_refused",
            "Connections cut before the app saw a request: slow headers or body (timeout), "
            "headers over the size or count cap.",
            ("reason",),
            registry=registry,
        )

    def observe(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one answered request."""
        self.requests.labels(route, method, str(status)).inc()
        self.seconds.labels(route, method).observe(seconds)


def route_template(scope: Scope) -> str:
    """The template of the route that served ``scope`` (the router leaves the route in
    the scope), or ``unmatched`` when none did: an unknown path, or a request refused
    before routing (a body over the limit)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED


class AccessLog:
    """Request ids, one access log line and the HTTP metrics per request (see the module)."""

    def __init__(self, app: ASGIApp, *, metrics: HttpMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        method = scope["method"] if scope["method"] in METHODS else "other"
        sent: bytes | None = None
        for name, value in scope.get("headers", ()):
            if name == _HEADER_KEY:
                sent = value
                break
        status = 500  # unless a response starts: an exception escaping the app is a 500
        try:
            request_id = request_id_of(sent)
        except InvalidInput as exc:
            request_id = uuid.uuid4().hex
            facts = RequestFacts(request_id=request_id)
            status = 422
            response = error_response(exc)
            response.headers[HEADER] = request_id
            try:
                await response(scope, receive, send)
            finally:
                self._done(scope, method, status, facts, started)
            return
        facts = RequestFacts(request_id=request_id)
        scope[SCOPE_KEY] = facts
        echoed = (_HEADER_KEY, request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", ()) if k != _HEADER_KEY]
                message = {**message, "headers": [*headers, echoed]}
            await send(message)

        before = logs.bound()
        logs.bind(request_id=request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            logs.bind(request_id=before.get("request_id"))
            self._done(scope, method, status, facts, started)

    def _done(self, scope: Scope, method: str, status: int, facts: RequestFacts, started: float) -> None:
        seconds = time.perf_counter() - started
        route = route_template(scope)
        self.metrics.observe(route, method, status, seconds)
        log.info(
            "http_request",
            extra={
                "method": method,
                "route": route,
                "tenant": facts.tenant or "-",
                "status": status,
                "ms": round(seconds * 1000, 2),
                "request_id": facts.request_id,
            },
        )
