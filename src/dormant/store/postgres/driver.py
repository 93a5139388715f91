"""The PostgreSQL driver boundary: connection types, the JSON the ``dormant_*``
functions take, and the translation of driver errors into dormant errors."""

from __future__ import annotations

from typing import Any

import msgspec
import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import PoolTimeout, TooManyRequests

from ...errors import (
    DormantError,
    IdempotencyMismatch,
    InvalidInput,
    LeaseLost,
    NotFound,
    Overloaded,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    StoreUnreachable,
)

Conn = psycopg.AsyncConnection[TupleRow]
Rows = list[tuple[Any, ...]]

#: SQLSTATEs of text the server cannot store (in jsonb: ``\u0000``; in text: 0x00).
UNSTORABLE_TEXT = frozenset({"22P05", "22021"})
#: SQLSTATEs after which the whole transaction can simply be run again.
RETRYABLE = frozenset({"40001", "40P01", "55P03"})

_encode = msgspec.json.encode


def encode(value: Any) -> str:
    """``value`` (records, lists of records) as the JSON text the dormant_* functions take."""
    return _encode(value).decode()


def clean_text(text: str | None) -> str | None:
    """A diagnostic text (an error message) PostgreSQL can store: NUL characters, which
    no PostgreSQL text can hold, become U+FFFD. Never used on content: content with NUL
    is refused (:class:`~dormant.errors.InvalidInput`)."""
    return text.replace("\x00", "\ufffd") if text and "\x00" in text else text


def _unstorable(exc: psycopg.Error, state: str) -> bool:
    """Whether ``exc`` says a text holds what PostgreSQL cannot store (a NUL); psycopg
    refuses a NUL in a text parameter itself, before sending, with no SQLSTATE."""
    return state in UNSTORABLE_TEXT or (
        isinstance(exc, psycopg.DataError) and not state and "NUL" in str(exc)
    )


def sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a driver error ('' when it has none)."""
    return getattr(exc, "sqlstate", None) or ""


def translate(exc: BaseException) -> BaseException:
    """Turn a psycopg / pool error into the dormant error a caller should see."""
    if isinstance(exc, DormantError):
        return exc
    if isinstance(exc, PoolTimeout | TooManyRequests):
        new: DormantError = Overloaded(
            f"no free PostgreSQL connection in the pool ({exc}); raise DORMANT_PG_POOL_SIZE "
            "or lower the concurrency",
            retry_after=1.0,
        )
    elif not isinstance(exc, psycopg.Error):
        return exc
    else:
        state = sqlstate(exc)
        diag = exc.diag.message_primary if exc.diag is not None else None
        text = diag or str(exc).strip() or type(exc).__name__
        if _unstorable(exc, state):
            new = InvalidInput(
                f"a text holds a NUL character (\\x00), which PostgreSQL cannot store ({text}); "
                "remove it before it reaches the store"
            )
        elif state == "DM001":
            new = LeaseLost(text)
        elif state == "DM002":
            new = NotFound(text)
        elif state == "DM003":
            new = StoreError(text)
        elif state == "DM004":
            new = IdempotencyMismatch(text)
        elif state == "53100":
            new = StoreFull(f"the PostgreSQL server's disk is full: {text}")
        elif state == "53300":
            new = Overloaded(
                f"PostgreSQL refuses new connections ({text}); lower pool sizes or worker counts "
                "or raise max_connections",
                retry_after=2.0,
            )
        elif state in RETRYABLE:
            new = StoreLocked(f"PostgreSQL kept the transaction waiting or aborted it: {text}; retry")
        elif state == "25006":
            new = StoreError(f"the PostgreSQL server is read-only (a standby after failover?): {text}")
        elif state.startswith(("42", "3F")):
            new = SchemaError(f"the PostgreSQL schema does not match this dormant ({state}): {text}")
        elif state.startswith(("08", "57")) or isinstance(exc, psycopg.OperationalError):
            new = StoreUnreachable(f"lost or refused the connection to PostgreSQL: {text}")
        else:
            new = StoreError(f"PostgreSQL error {state or ''}: {text}".replace("  ", " "))
    new.__cause__ = exc
    return new


def lost_commit(exc: BaseException) -> StoreUnreachable:
    """The error for a batch whose connection broke before its answer came back: COMMIT
    may or may not have reached the server. It is :class:`StoreUnreachable` (retried later,
    never counted against a thread): retrying is safe either way, since a slice that did
    commit finds its lease gone (the retry is fenced) and admissions are deduplicated."""
    new = StoreUnreachable(
        f"lost the connection to PostgreSQL during a commit ({str(exc).strip() or type(exc).__name__}); "
        "the outcome is unknown: retry (a committed slice's lease is gone, admissions are deduplicated)"
    )
    new.__cause__ = exc
    return new
