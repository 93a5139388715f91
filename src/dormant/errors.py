"""The one exception hierarchy of dormant.

Errors are split by who must act:

* the caller's mistake: :class:`UsageError`, :class:`NotFound`, :class:`InvalidInput`;
* an operational condition: :class:`StoreError` (and :class:`StoreFull`,
  :class:`StoreLocked`, :class:`StoreUnreachable`, :class:`SchemaError`), :class:`Overloaded`,
  :class:`LeaseLost`, :class:`ModelError`, :class:`ToolError`.

Each class has a stable ``code`` and an HTTP status in :data:`HTTP_STATUS`.
Driver errors are translated at the store boundary with ``raise ... from exc``.
"""

from __future__ import annotations


class DormantError(Exception):
    """Base of every error dormant raises on purpose."""

    code = "dormant_error"


class UsageError(DormantError):
    """The caller used the API or CLI wrongly (bad URL, bad option, bad state)."""

    code = "usage_error"


class WorkerIdInUse(UsageError):
    """Another live process already claims work under this worker id (two workers configured
    with the same id would share every lease): give each worker its own."""

    code = "worker_id_in_use"


class NotFound(UsageError):
    """A named thread, input, blob or agent does not exist."""

    code = "not_found"


class ModelNotFound(NotFound):
    """An OpenAI-compatible request named a model (an agent) this server does not host."""

    code = "model_not_found"


class InvalidInput(UsageError):
    """An input was refused before anything was written (too large, bad kind, ...)."""

    code = "invalid_input"


class PayloadTooLarge(InvalidInput):
    """A request or input is larger than the configured limit; nothing was read past it."""

    code = "payload_too_large"


class UnsupportedMedia(InvalidInput):
    """A content part's bytes are not of a media type dormant takes (sniffed, never the
    client's claim), or are not what they claim to be (a truncated image); nothing written."""

    code = "unsupported_media_type"


class Unauthenticated(UsageError):
    """A request carried no valid credentials (missing, unknown or revoked API key)."""

    code = "unauthenticated"


class Busy(UsageError):
    """The thread is running a slice and the request asked not to queue behind it."""

    code = "thread_busy"


class DecisionConflict(UsageError):
    """A different decision was already recorded for that call; ``first`` is it (an
    :class:`~dormant.records.Approval`)."""

    code = "decision_conflict"

    def __init__(self, message: str, first: object = None) -> None:
        super().__init__(message)
        self.first = first


class StoreError(DormantError):
    """The durable store failed; nothing the failing call did was acknowledged."""

    code = "store_error"


class StoreFull(StoreError):
    """The database or its disk is full; retry once space is freed."""

    code = "store_full"


class StoreLocked(StoreError):
    """The database stayed locked by another process longer than the busy timeout."""

    code = "store_locked"


class StoreUnreachable(StoreError):
    """The connection to the database server was lost or refused (a restart, a failover,
    a partition); retry once it answers again. Not the fault of the work that was running."""

    code = "store_unreachable"


class SchemaError(StoreError):
    """The database schema is newer than this runtime, or damaged."""

    code = "schema_error"


class Overloaded(DormantError):
    """The runtime refuses new work for now; retry after ``retry_after`` seconds."""

    code = "overloaded"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


#: The errors that say "not now", no fault of the work that was running: it is retried later.
RETRY_LATER: tuple[type[DormantError], ...] = (StoreFull, StoreLocked, StoreUnreachable, Overloaded)


class QuotaExceeded(Overloaded):
    """A tenant of ``dormant serve`` is over one of its quotas (threads, admissions per
    second); 429 with ``Retry-After``, like any overload."""

    code = "quota_exceeded"


class ShuttingDown(Overloaded):
    """The server is stopping: a request waiting for a reply is answered 503 at once (what
    it admitted is durable and is answered later; retry on another server or after)."""

    code = "shutting_down"


class IdempotencyMismatch(InvalidInput):
    """An ``Idempotency-Key`` already used with a different request body: refused, 422,
    nothing written (the first body's admission stands)."""

    code = "idempotency_mismatch"


class LeaseLost(DormantError):
    """A worker's lease on a thread or outbox entry expired or was taken over."""

    code = "lease_lost"


class ModelError(DormantError):
    """The model call failed. ``retryable`` tells whether a later attempt may succeed.

    ``kind`` says why, for callers that act on it:

    * ``"error"``: anything else (a refused request, a malformed reply, a broken stream);
    * ``"outage"``: the endpoint is unreachable or failing (transport errors, 5xx) or its
      circuit breaker is open; not the request's fault, so a thread should wait
      ``retry_after`` seconds rather than count a failure (:attr:`outage`);
    * ``"context_overflow"``: the server refused the prompt as longer than its window; a
      smaller view may succeed (:attr:`context_overflow`);
    * ``"refused"``: the server's content filter or the model refused to answer.
    """

    code = "model_error"

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = True,
        retry_after: float | None = None,
        kind: str = "error",
    ):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.kind = kind

    @property
    def outage(self) -> bool:
        """Whether the endpoint is down or its breaker open (wait, do not count a failure)."""
        return self.kind == "outage"

    @property
    def context_overflow(self) -> bool:
        """Whether the prompt was too long for the server: retry once with a smaller view."""
        return self.kind == "context_overflow"


class ToolError(DormantError):
    """A tool failed. Raise it from a tool with ``retryable=True`` to ask for a retry."""

    code = "tool_error"

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


HTTP_STATUS: dict[type[DormantError], int] = {
    DormantError: 500,
    UsageError: 400,
    NotFound: 404,
    ModelNotFound: 404,
    InvalidInput: 422,
    IdempotencyMismatch: 422,
    PayloadTooLarge: 413,
    UnsupportedMedia: 415,
    Unauthenticated: 401,
    Busy: 409,
    WorkerIdInUse: 409,
    DecisionConflict: 409,
    StoreError: 503,
    StoreFull: 507,
    StoreLocked: 503,
    StoreUnreachable: 503,
    SchemaError: 500,
    Overloaded: 429,
    QuotaExceeded: 429,
    ShuttingDown: 503,
    LeaseLost: 409,
    ModelError: 502,
    ToolError: 502,
}


def http_status(exc: DormantError) -> int:
    """The HTTP status for ``exc``: the entry of its nearest class in :data:`HTTP_STATUS`."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500
