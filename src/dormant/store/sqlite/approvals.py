"""Waits for a person on SQLite: the ``approvals`` part of
:class:`~dormant.store.sqlite.backend.SQLiteBackend` (see
:class:`~dormant.store.parts.ApprovalRows`). A decision is one job of the
group-committing writer: the row's update and the outbox entry or tool result it
makes commit together. The rules are :class:`~dormant.store.core_approvals.ApprovalRules`'."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...records import Approval
from ..core import result_input
from . import approvals_sql as q
from . import sql
from .jobs import admit_one
from .journal import Query, Write
from .writer import Conn


def row_approval(r: Any) -> Approval:
    """An ``approvals`` row (:data:`approvals_sql.COLS`) as its record."""
    return Approval(
        id=r[0],
        thread_id=r[1],
        tenant=r[2],
        call_id=r[3],
        kind=r[4],
        tool=r[5],
        arguments=r[6],
        status=r[7],
        role=r[8],
        deadline=r[9],
        escalate_role=r[10],
        escalate_s=r[11],
        decision_key=r[12],
        decided_by=r[13],
        note=r[14],
        decided_arguments=r[15],
        requested_at=r[16],
        decided_at=r[17],
    )


class SQLiteApprovals:
    """Approval rows."""

    def __init__(self, write: Write, query: Query, clock: Callable[[], float]) -> None:
        self._write = write
        self._query = query
        self.clock = clock

    async def approval_rows(
        self,
        *,
        tenant: str | None,
        thread_id: str | None,
        tool: str | None,
        status: str | None,
        open_only: bool,
        requested_before: float,
        after: int,
        limit: int,
    ) -> list[Approval]:
        """A page of waits (see :class:`~dormant.store.parts.ApprovalRows`)."""
        params = {
            "after": after,
            "before": requested_before,
            "tenant": tenant,
            "thread": thread_id,
            "tool": tool,
            "status": status,
            "open": int(open_only),
            "limit": limit,
        }
        return [row_approval(r) for r in self._query(q.PAGE, params)]  # type: ignore[arg-type]

    async def get_approval(self, thread_id: str, call_id: str) -> Approval | None:
        """One wait, None if none."""
        rows = self._query(q.GET, (thread_id, call_id))
        return row_approval(rows[0]) if rows else None

    async def due_approvals(self, now: float, limit: int) -> list[Approval]:
        """Open waits past their deadline, earliest first."""
        return [row_approval(r) for r in self._query(q.DUE, (now, limit))]

    async def open_approvals(self, tenant: str | None) -> tuple[int, float | None]:
        """How many waits are open and the oldest's request time."""
        count, oldest = self._query(q.OPEN, (tenant,))[0]
        return int(count), oldest

    async def decide_approval(
        self,
        thread_id: str,
        call_id: str,
        *,
        status: str,
        key: str | None,
        by: str | None,
        note: str | None,
        arguments: str | None,
        role: str | None,
        deadline: float,
        result: str,
    ) -> tuple[bool, Approval] | None:
        """Act on an open wait, one transaction (see :class:`~dormant.store.parts.ApprovalRows`)."""
        now = self.clock()

        def job(conn: Conn) -> tuple[bool, Approval] | None:
            params = {"thread": thread_id, "call": call_id}
            if status == "escalated":
                acted = conn.execute(q.ESCALATE, {**params, "role": role, "deadline": deadline}).fetchall()
            else:
                decided = {"status": status, "key": key, "by": by, "note": note, "arguments": arguments}
                acted = conn.execute(q.DECIDE, {**params, **decided, "now": now}).fetchall()
            rows = conn.execute(q.GET, (thread_id, call_id)).fetchall()
            if not rows:
                return None
            row = row_approval(rows[0])
            if not acted:
                return False, row
            if status in ("approved", "edited"):
                conn.execute(
                    sql.INSERT_CALL,
                    (thread_id, call_id, row.tool, arguments, acted[0][0], now, now, "pending"),
                )
            elif status != "escalated":
                admit_one(conn, result_input(thread_id, call_id, row.tool, result, False), now)
            return True, row

        size = len(result) + len(note or "") + len(arguments or "") + 512
        answer: tuple[bool, Approval] | None = await self._write(job, size)
        return answer
