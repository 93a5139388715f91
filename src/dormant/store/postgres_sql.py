"""The PostgreSQL backend's statements, row converters, error translation, the write
job record and the view loader.

The statements here are the ones the store sends itself; the multi-row write paths
are functions in ``postgres_schema.sql`` (one statement per domain operation).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import PoolTimeout, TooManyRequests

from ..context import build_view
from ..errors import (
    DormantError,
    LeaseLost,
    NotFound,
    Overloaded,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
)
from ..records import Message, Summary, Thread, ViewLimits
from .rows import INPUT_COLS, MESSAGE_COLS, OUTBOX_COLS, SUMMARY_COLS, THREAD_COLS, row_message, row_summary

Conn = psycopg.AsyncConnection[TupleRow]
Rows = list[tuple[Any, ...]]
#: Job.notify flags: ready input (wake schedulers), new outbox entries (wake dispatchers).
NOTIFY_THREADS, NOTIFY_OUTBOX = 1, 2


# The multi-row operations take their records as one jsonb document (msgspec encoding).
ADMIT = "SELECT r_input_id, r_duplicate FROM dormant_admit(%s::jsonb, %s::float8[], %s::float8)"
COMMIT_SLICE = "SELECT dormant_commit_slice(%s::jsonb, %s::float8[], %s::float8)"
FINISH_OUTBOX = "SELECT held FROM dormant_finish_outbox(%s::jsonb, %s::float8, %s::float8) AS held"
CLAIM_OUTBOX = (
    f"SELECT {OUTBOX_COLS} FROM dormant_claim_outbox(%s, %s::integer, %s, %s::float8, %s::float8, "
    "%s::float8, %s)"
)
COMPLETE_CALL = (
    "SELECT r_input_id, r_duplicate FROM dormant_complete_call(%s, %s, %s, %s, %s::float8, %s::float8)"
)
CREATE_THREAD = f"SELECT {THREAD_COLS} FROM dormant_create_thread(%s, %s, %s::float8)"
# Lease the best-keyed ready threads. Rows another transaction holds are skipped, not
# waited for: that is what lets many workers claim from one table.
CLAIM_THREADS = """
WITH picked AS (
    SELECT id, ready_key FROM threads
    WHERE ready_key IS NOT NULL AND ready_at <= %(now)s AND lease_expires <= %(now)s
    ORDER BY ready_key
    LIMIT %(limit)s
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE threads t SET lease_token = %(token)s, lease_owner = %(worker)s, lease_expires = %(expires)s
FROM picked WHERE t.id = picked.id
RETURNING t.id, picked.ready_key, t.agent
"""
RENEW_LEASES = """
UPDATE threads t SET lease_expires = %s
FROM unnest(%s::text[], %s::text[]) AS c (id, token)
WHERE t.id = c.id AND t.lease_token = c.token
RETURNING t.id
"""
# A failed thread is not ready (ready_key NULL) until retry_thread recomputes it.
RELEASE = """
UPDATE threads SET lease_token = NULL, lease_owner = NULL, lease_expires = %(retry_at)s,
    failures = failures + %(inc)s, error = coalesce(%(error)s, error),
    status = CASE WHEN %(fail)s THEN 'failed' ELSE status END, updated_at = %(now)s,
    ready_key = CASE WHEN %(fail)s THEN NULL ELSE ready_key END,
    ready_at = CASE WHEN %(fail)s THEN NULL ELSE ready_at END
WHERE id = %(id)s AND lease_token = %(token)s
"""
RETRY_THREAD = f"""
UPDATE threads t SET status = 'active', failures = 0, error = NULL, lease_expires = 0,
    updated_at = %(now)s,
    ready_key = (SELECT min(i.sort_key) FROM inputs i
                 WHERE i.thread_id = t.id AND (t.awaiting = 0 OR i.kind = 'tool_result')),
    ready_at = (SELECT min(i.not_before) FROM inputs i
                WHERE i.thread_id = t.id AND (t.awaiting = 0 OR i.kind = 'tool_result'))
WHERE t.id = %(id)s
RETURNING {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))}
"""
# Lock the thread rows a batch will change, in id order, before it changes them: two
# batches (of two workers) then never wait for each other in a cycle.
LOCK_THREADS = """
SELECT 1 FROM threads
WHERE id = ANY (%s::text[]) OR id IN (SELECT thread_id FROM outbox WHERE id = ANY (%s::bigint[]))
ORDER BY id
FOR NO KEY UPDATE
"""
# The thread row and its ready inputs (admission order) in one statement.
LOAD_SLICE = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}
FROM threads t
LEFT JOIN LATERAL (
    SELECT {INPUT_COLS} FROM inputs
    WHERE inputs.thread_id = t.id AND inputs.not_before <= %(now)s
      AND (t.awaiting = 0 OR inputs.kind = 'tool_result')
    ORDER BY inputs.id
    LIMIT %(limit)s
) i ON true
WHERE t.id = %(id)s
ORDER BY i.id
"""
NEWEST_MESSAGES = (
    f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq <= %s AND seq > %s "
    "ORDER BY seq DESC LIMIT %s"
)
SUMMARY_AT = f"SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = %s AND upto_seq = %s"
# The latest summary a child spawned at parent_seq inherited from that parent.
SUMMARY_INHERITED = (
    f"SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = %s AND made_at_seq <= %s "
    "ORDER BY upto_seq DESC LIMIT 1"
)
PARENT_OF = "SELECT parent_id, parent_seq FROM threads WHERE id = %s"
HAS_WORK = """
SELECT EXISTS (SELECT 1 FROM threads WHERE ready_key IS NOT NULL AND ready_at <= %(now)s)
    OR EXISTS (SELECT 1 FROM threads WHERE lease_token IS NOT NULL)
    OR EXISTS (SELECT 1 FROM outbox WHERE status IN ('pending', 'running'))
"""
TABLE_BYTES = """
SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c
WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'
  AND c.relname IN ('threads', 'inputs', 'input_keys', 'messages', 'outbox', 'schema_version',
                    'summaries', 'blobs', 'blob_chunks', 'blob_refs')
"""

_encode = msgspec.json.encode


def encode(value: Any) -> str:
    """``value`` (records, lists of records) as the JSON text the dormant_* functions take."""
    return _encode(value).decode()


#: SQLSTATEs after which the whole transaction can simply be run again.
RETRYABLE = frozenset({"40001", "40P01", "55P03"})


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
        if state == "DM001":
            new = LeaseLost(text)
        elif state == "DM002":
            new = NotFound(text)
        elif state == "DM003":
            new = StoreError(text)
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
            new = StoreError(f"lost or refused the connection to PostgreSQL: {text}")
        else:
            new = StoreError(f"PostgreSQL error {state or ''}: {text}".replace("  ", " "))
    new.__cause__ = exc
    return new


@dataclass(slots=True, eq=False)
class Job:
    """One write queued to a PostgresStore's writer: a statement, how to read its
    answer, the rows it changes (locked first, in id order) and the hints it sends."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any]
    #: (rows, rowcount) -> the caller's answer; raises only when the statement changed nothing
    decode: Callable[[Rows, int], Any]
    threads: Sequence[str] = ()  # thread rows it changes
    entries: Sequence[int] = ()  # outbox entries whose thread rows it changes
    notify: int = 0  # NOTIFY_THREADS | NOTIFY_OUTBOX


class _Missing(Exception):
    """build_view asked for data not fetched yet: (thread, max_seq, min_seq, limit) or (thread,)."""


async def load_view(
    conn: Conn, thread: Thread, limits: ViewLimits
) -> tuple[tuple[Message, ...], Summary | None, int]:
    """:func:`~dormant.context.build_view` over data fetched on demand: the view, its
    summary and how many of its messages are inherited.

    build_view is pure and its callbacks are synchronous, so it runs against what has
    been fetched so far; when it asks for more (older messages, a parent link) the
    answer is fetched and it runs again: one round trip per chunk or level of lineage.
    """
    messages: dict[tuple[str, int, int], tuple[int, list[Message]]] = {}
    parents: dict[str, tuple[str, int] | None] = {}

    async def parent(thread_id: str) -> tuple[str, int] | None:
        if thread_id not in parents:
            row = await (await conn.execute(PARENT_OF, (thread_id,))).fetchone()
            parents[thread_id] = (row[0], row[1]) if row and row[0] else None
        return parents[thread_id]

    summary: Summary | None = None
    if thread.summary_seq:
        row = await (await conn.execute(SUMMARY_AT, (thread.id, thread.summary_seq))).fetchone()
        summary = row_summary(row) if row else None
    else:
        link = (thread.parent_id, thread.parent_seq) if thread.parent_id else None
        while link is not None:
            row = await (await conn.execute(SUMMARY_INHERITED, link)).fetchone()
            if row is not None:
                summary = row_summary(row)
                break
            link = await parent(link[0])

    def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        got = messages.get((thread_id, max_seq, min_seq))
        # a shorter answer than asked for means the history ended there
        if got is None or (got[0] < limit and len(got[1]) >= got[0]):
            raise _Missing(thread_id, max_seq, min_seq, limit)
        return got[1][:limit]

    def parent_of(thread_id: str) -> tuple[str, int] | None:
        if thread_id not in parents:
            raise _Missing(thread_id)
        return parents[thread_id]

    while True:
        try:
            view, inherited = build_view(thread, limits, fetch, parent_of, summary)
            return view, summary, inherited
        except _Missing as missing:
            if len(missing.args) == 4:
                thread_id, max_seq, min_seq, limit = missing.args
                cursor = await conn.execute(NEWEST_MESSAGES, (thread_id, max_seq, min_seq, limit))
                rows = [row_message(r) for r in await cursor.fetchall()]
                messages[(thread_id, max_seq, min_seq)] = (limit, rows)
            else:
                await parent(missing.args[0])
