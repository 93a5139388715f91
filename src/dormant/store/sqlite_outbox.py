"""The outbox operations of the SQLite store: claiming calls, recording their outcomes,
answering calls from outside.

A mixin of :class:`~dormant.store.sqlite.SQLiteStore` (it uses the store's writer and
admission); the statements live in :mod:`~dormant.store.sqlite_sql`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import msgspec

from .. import inbox
from ..errors import NotFound, UsageError
from ..records import Admission, NewInput, OutboxEntry, OutboxOutcome
from .rows import row_entry
from .sqlite_sql import CLAIM_OUTBOX
from .sqlite_writer import Conn, Job


class SQLiteOutbox:
    """Claim, finish and answer async tool calls (the ``outbox`` table)."""

    if TYPE_CHECKING:
        clock: Callable[[], float]
        max_input_bytes: int

        async def _write(self, job: Job, size: int = 256) -> Any: ...

        def _read(self) -> Conn: ...

        def _admit_one(self, conn: Conn, item: NewInput, now: float) -> Admission: ...

    async def claim_outbox(self, worker: str, limit: int, lease_s: float) -> list[OutboxEntry]:
        """Reconcile expired running entries, then lease due pending ones."""

        def job(conn: Conn) -> list[OutboxEntry]:
            now = self.clock()
            expired = conn.execute(
                "SELECT id, thread_id, call_id, tool, idempotent FROM outbox "
                "WHERE status = 'running' AND lease_expires <= ? ORDER BY lease_expires LIMIT 256",
                (now,),
            ).fetchall()
            for entry_id, thread_id, call_id, tool, idempotent in expired:
                if idempotent:
                    conn.execute(
                        "UPDATE outbox SET status = 'pending', available_at = ?, lease_token = NULL, "
                        "lease_owner = NULL, lease_expires = 0 WHERE id = ?",
                        (now, entry_id),
                    )
                else:
                    conn.execute(
                        "UPDATE outbox SET status = 'unknown', finished_at = ?, lease_token = NULL, "
                        "lease_owner = NULL, last_error = 'lease expired while running' WHERE id = ?",
                        (now, entry_id),
                    )
                    self._admit_result(conn, thread_id, call_id, tool, inbox.UNKNOWN_OUTCOME, True, now)
            if limit <= 0:
                return []
            params = {
                "now": now,
                "limit": limit,
                "token": secrets.token_hex(8),
                "worker": worker,
                "expires": now + lease_s,
            }
            return sorted((row_entry(r) for r in conn.execute(CLAIM_OUTBOX, params)), key=lambda e: e.id)

        result: list[OutboxEntry] = await self._write(job)
        return result

    def _admit_result(
        self,
        conn: Conn,
        thread_id: str,
        call_id: str,
        tool: str,
        content: str,
        is_error: bool,
        now: float,
    ) -> None:
        item = NewInput(
            thread_id=thread_id,
            kind="tool_result",
            dedup_key=call_id,
            content=content,
            call_id=call_id,
            tool_name=tool,
            is_error=is_error,
        )
        self._admit_one(conn, item, now)

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False
    ) -> Admission:
        """Answer an open call from outside; see :meth:`Store.complete_call`."""
        item = NewInput(
            thread_id=thread_id, kind="tool_result", dedup_key=call_id, content=content, call_id=call_id
        )
        inbox.validate([item], self.max_input_bytes)
        now = self.clock()

        def job(conn: Conn) -> Admission:
            known = conn.execute(
                "SELECT input_id FROM input_keys WHERE thread_id = ? AND dedup_key = ?", (thread_id, call_id)
            ).fetchone()
            if known is not None:
                return Admission(input_id=known[0], thread_id=thread_id, dedup_key=call_id, duplicate=True)
            row = conn.execute(
                "DELETE FROM outbox WHERE thread_id = ? AND call_id = ? AND status IN ('pending', 'running') "
                "RETURNING tool",
                (thread_id, call_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"thread {thread_id!r} has no open call {call_id!r}")
            answer = msgspec.structs.replace(item, tool_name=row[0], is_error=is_error)
            return self._admit_one(conn, answer, now)

        result: Admission = await self._write(job, len(content) + 256)
        return result

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the tool result in the same transaction."""
        for outcome in outcomes:
            if len(outcome.content.encode()) > self.max_input_bytes:
                raise UsageError("tool result exceeds the input size limit; truncate it first")
        now = self.clock()

        def job(conn: Conn) -> list[bool]:
            held = []
            for o in outcomes:
                if o.kind == "retry":
                    conn.execute(
                        "UPDATE outbox SET status = 'pending', available_at = ?, last_error = ?, "
                        "lease_token = NULL, lease_owner = NULL, lease_expires = 0 "
                        "WHERE id = ? AND status = 'running' AND lease_token = ?",
                        (o.retry_at, o.error, o.entry_id, o.token),
                    )
                    held.append(conn.changes() == 1)
                    continue
                if o.kind == "done":
                    row = conn.execute(
                        "DELETE FROM outbox WHERE id = ? AND status = 'running' AND lease_token = ? "
                        "RETURNING thread_id, call_id, tool",
                        (o.entry_id, o.token),
                    ).fetchone()
                else:
                    row = conn.execute(
                        "UPDATE outbox SET status = 'dead', finished_at = ?, last_error = ?, "
                        "lease_token = NULL, lease_owner = NULL, lease_expires = 0 "
                        "WHERE id = ? AND status = 'running' AND lease_token = ? "
                        "RETURNING thread_id, call_id, tool",
                        (now, o.error, o.entry_id, o.token),
                    ).fetchone()
                held.append(row is not None)
                if row is not None:
                    self._admit_result(conn, row[0], row[1], row[2], o.content, o.is_error, now)
            return held

        size = sum(len(o.content) for o in outcomes) + 256
        result: list[bool] = await self._write(job, size)
        return result
