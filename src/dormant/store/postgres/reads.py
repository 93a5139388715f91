"""The PostgreSQL backend's reads: the rows of a slice load (a
:class:`~dormant.store.backend.SliceReader` on one pooled connection) and the API's
paged and status reads. Rows only: the core pages, cuts and builds views."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...records import (
    READY_AGENTS_SHOWN,
    WAIT_REASONS_SHOWN,
    Claim,
    Input,
    Message,
    OutboxEntry,
    StoreStatus,
    Summary,
    Thread,
)
from ..rows import THREAD_WIDTH, row_entry, row_input, row_message, row_summary, row_thread, usage_and_waits
from . import sql
from .driver import Conn, Rows, translate


class PgSliceReader:
    """The reads of one slice load, on one connection (see ``SliceReader``)."""

    def __init__(self, conn: Conn, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.clock = clock

    async def _one(self, statement: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
        try:
            return await (await self.conn.execute(statement, params)).fetchone()
        except psycopg.Error as exc:
            raise translate(exc) from exc

    async def slice_rows(
        self, claim: Claim, max_inputs: int, max_bytes: int
    ) -> tuple[Thread, list[Input], str | None] | None:
        """The thread row and its ready inputs (admission order, bounded in count and
        bytes) in one statement."""
        params = {"id": claim.thread_id, "now": self.clock(), "limit": max_inputs, "bytes": max_bytes}
        try:
            rows = await (await self.conn.execute(sql.LOAD_SLICE, params)).fetchall()
        except psycopg.Error as exc:
            raise translate(exc) from exc
        if not rows:
            return None
        thread = row_thread(rows[0])
        if rows[0][THREAD_WIDTH] is None:  # the LEFT JOIN found no ready input
            return thread, [], rows[0][-1]
        return thread, [row_input(row[THREAD_WIDTH:]) for row in rows], rows[0][-1]

    async def newest_messages(self, thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        """Messages ``min_seq < seq <= max_seq``, newest first, at most ``limit``."""
        try:
            cursor = await self.conn.execute(sql.NEWEST_MESSAGES, (thread_id, max_seq, min_seq, limit))
            return [row_message(r) for r in await cursor.fetchall()]
        except psycopg.Error as exc:
            raise translate(exc) from exc

    async def parent_link(self, thread_id: str) -> tuple[str, int] | None:
        """``(parent_id, parent_seq)``; None for a root or a missing thread."""
        row = await self._one(sql.PARENT_OF, (thread_id,))
        return (row[0], int(row[1])) if row and row[0] else None

    async def summary_at(self, thread_id: str, upto_seq: int) -> Summary | None:
        """The summary of the thread up to ``upto_seq``."""
        row = await self._one(sql.SUMMARY_AT, (thread_id, upto_seq))
        return row_summary(row) if row else None

    async def summary_inherited(self, thread_id: str, parent_seq: int) -> Summary | None:
        """The newest summary of ``thread_id`` made at or before ``parent_seq``."""
        row = await self._one(sql.SUMMARY_INHERITED, (thread_id, parent_seq))
        return row_summary(row) if row else None


class PgReads:
    """The API's reads over the read pool (``reads`` raises StoreError while closed)."""

    def __init__(self, reads: Callable[[], AsyncConnectionPool[Conn]], clock: Callable[[], float]) -> None:
        self._reads = reads
        self.clock = clock

    async def rows(self, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Rows:
        """All rows of one statement on a pooled connection."""
        try:
            async with self._reads().connection() as conn:
                return await (await conn.execute(statement, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread row, None if missing."""
        rows = await self.rows(sql.GET_THREAD, (thread_id,))
        return row_thread(rows[0]) if rows else None

    async def history_rows(
        self, thread_id: str, after: int, limit: int, newest_first: bool, max_bytes: int | None = None
    ) -> list[Message] | None:
        """Messages after (before, newest first) seq ``after``, bounded by ``max_bytes``;
        None if the thread is missing."""
        params: Sequence[Any] | Mapping[str, Any] = (thread_id, after, limit)
        if max_bytes is None:
            statement = sql.HISTORY_NEWEST_FIRST if newest_first else sql.HISTORY_OLDEST_FIRST
        else:
            statement = sql.HISTORY_NEWEST_FIRST_BYTES if newest_first else sql.HISTORY_OLDEST_FIRST_BYTES
            params = {"thread": thread_id, "after": after, "limit": limit, "max_bytes": max_bytes}
        try:
            async with self._reads().connection() as conn:
                known = await (await conn.execute(sql.THREAD_EXISTS, (thread_id,))).fetchone()
                if known is None:
                    return None
                rows = await (await conn.execute(statement, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return [row_message(r) for r in rows]

    async def thread_rows(self, after: str, limit: int) -> list[Thread]:
        """Threads with id > ``after``, by id."""
        return [row_thread(r) for r in await self.rows(sql.LIST_THREADS, (after, limit))]

    async def outbox_rows(self, status: str | None, after: int, limit: int) -> list[OutboxEntry]:
        """Outbox entries (of ``status``) with id > ``after``, by id."""
        return [row_entry(r) for r in await self.rows(sql.LIST_OUTBOX, (after, status, status, limit))]

    async def has_work(self, agents: list[str] | None = None) -> bool:
        """Ready input (of ``agents``' threads, when given), a leased thread, or an open call."""
        rows = await self.rows(sql.HAS_WORK, {"now": self.clock(), "agents": agents})
        return bool(rows[0][0])

    async def status(self) -> StoreStatus:
        """Counts and sizes for ``dormant status``, in one pipelined round trip."""
        return await self._status(None)

    async def tenant_status(self, tenant: str) -> StoreStatus:
        """One tenant's counts (no sizes), in one pipelined round trip."""
        return await self._status(tenant)

    async def _status(self, tenant: str | None) -> StoreStatus:
        now = self.clock()
        args = {"tenant": tenant, "now": now}
        scope = {"tenant": tenant, "limit": WAIT_REASONS_SHOWN}
        if tenant is None:
            statements: list[tuple[str, Sequence[Any] | Mapping[str, Any]]] = [
                (sql.STATUS_THREADS, ()),
                (sql.STATUS_READY, (now,)),
                (sql.STATUS_LEASED, ()),
                (sql.STATUS_BACKLOG, ()),
                (sql.STATUS_OUTBOX, ()),
                (sql.STATUS_MESSAGES, ()),
                (sql.SCHEMA_VERSION, ()),
                (sql.TABLE_BYTES, ()),
                (sql.STATUS_USAGE, scope),
                (sql.STATUS_WAITING, scope),
                (sql.STATUS_WAITING_BY_REASON, scope),
                (sql.STATUS_READY_BY_AGENT, (now, now, READY_AGENTS_SHOWN)),
            ]
        else:
            statements = [
                (sql.TENANT_THREADS_BY_STATUS, args),
                (sql.TENANT_THREADS_READY, args),
                (sql.TENANT_THREADS_LEASED, args),
                (sql.TENANT_INPUTS_BY_PRIORITY, args),
                (sql.TENANT_OUTBOX_BY_STATUS, args),
                (sql.TENANT_MESSAGE_COUNT, args),
                (sql.SCHEMA_VERSION, ()),
                (sql.NO_BYTES, ()),
                (sql.STATUS_USAGE, scope),
                (sql.STATUS_WAITING, scope),
                (sql.STATUS_WAITING_BY_REASON, scope),
            ]
        try:
            async with self._reads().connection() as conn:
                async with conn.pipeline():
                    cursors = [await conn.execute(q, p) for q, p in statements]
                rows = [await c.fetchall() for c in cursors]
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        by_status, ready, leased, backlog, outbox, messages, version, size, usage, waiting, reasons = rows[
            :11
        ]
        by_agent = rows[11] if len(rows) > 11 else []
        counts = {str(s): int(n) for s, n in outbox}
        return StoreStatus(
            threads_by_status={str(s): int(n) for s, n in by_status},
            threads_ready=int(ready[0][0]),
            threads_leased=int(leased[0][0]),
            backlog_by_priority={f"P{p}": int(n) for p, n in backlog},
            outbox_by_status=counts,
            dead_letters=counts.get("dead", 0),
            messages=int(messages[0][0]),
            db_bytes=int(size[0][0]),
            wal_bytes=0,
            schema_version=int(version[0][0]),
            ready_by_agent={str(a): int(n) for a, n in by_agent},
            **usage_and_waits(usage[0], waiting[0], reasons),
        )
