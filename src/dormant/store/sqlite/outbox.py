"""The SQLite backend's outbox jobs: claiming calls, recording their outcomes,
answering calls from outside. Each runs in the group writer's transaction; the
statements are in :mod:`~dormant.store.sqlite.sql`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ... import inbox
from ...errors import NotFound
from ...records import Admission, NewInput, OutboxEntry, OutboxOutcome
from ..core import result_input
from ..rows import row_entry
from . import sql
from .jobs import admit_one

Conn = Any


def claim(
    conn: Conn, worker: str, limit: int, lease_s: float, token: str, now: float, tools: list[str] | None
) -> list[OutboxEntry]:
    """Reconcile expired running entries, then lease up to ``limit`` due pending ones (of
    the tool keys ``tools`` only, unless None)."""
    for entry_id, thread_id, call_id, tool, idempotent in conn.execute(sql.EXPIRED_CALLS, (now,)).fetchall():
        if idempotent:
            conn.execute(sql.CALL_PENDING_AGAIN, (now, entry_id))
        else:
            conn.execute(sql.CALL_UNKNOWN, (now, entry_id))
            admit_one(conn, result_input(thread_id, call_id, tool, inbox.UNKNOWN_OUTCOME, True), now)
    if limit <= 0:
        return []
    params = {
        "now": now,
        "limit": limit,
        "token": token,
        "worker": worker,
        "expires": now + lease_s,
        "tools": None if tools is None else msgspec.json.encode(tools),
    }
    return sorted((row_entry(r) for r in conn.execute(sql.CLAIM_OUTBOX, params)), key=lambda e: e.id)


def complete(conn: Conn, item: NewInput, now: float) -> Admission:
    """Answer an open call with ``item`` (see :meth:`Backend.complete_call`)."""
    call_id = item.dedup_key
    known = conn.execute(sql.INPUT_OF_KEY, (item.thread_id, call_id)).fetchone()
    if known is not None:
        return Admission(input_id=known[0], thread_id=item.thread_id, dedup_key=call_id, duplicate=True)
    row = conn.execute(sql.TAKE_OPEN_CALL, (item.thread_id, call_id)).fetchone()
    if row is None:
        raise NotFound(f"thread {item.thread_id!r} has no open call {call_id!r}")
    return admit_one(conn, msgspec.structs.replace(item, tool_name=row[0]), now)


def finish(conn: Conn, outcomes: Sequence[OutboxOutcome], now: float) -> list[bool]:
    """Record outcomes whose lease is held; done/dead admit the result."""
    held = []
    for o in outcomes:
        if o.kind == "retry":
            conn.execute(sql.CALL_RETRY, (o.retry_at, o.error, o.entry_id, o.token))
            held.append(conn.changes() == 1)
            continue
        if o.kind == "done":
            row = conn.execute(sql.CALL_DONE, (o.entry_id, o.token)).fetchone()
        else:
            row = conn.execute(sql.CALL_DEAD, (now, o.error, o.entry_id, o.token)).fetchone()
        held.append(row is not None)
        if row is not None:
            admit_one(conn, result_input(row[0], row[1], row[2], o.content, o.is_error, o.parts), now)
    return held
