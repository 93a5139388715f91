"""The SQLite backend's write jobs for threads, admission and slices.

Each function runs inside the group writer's transaction (see
:mod:`~dormant.store.sqlite.writer`) on its connection; the statements are in
:mod:`~dormant.store.sqlite.sql`. No rule of the store core is decided here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import apsw
import msgspec

from ... import inbox
from ...errors import IdempotencyMismatch, InvalidInput, LeaseLost, NotFound, StoreError
from ...records import Admission, Claim, CommitPlan, NewInput, Thread, Usage
from ..rows import encode_parts, row_thread
from . import approvals_sql, journal_sql, sql

Conn = Any
_NO_USAGE = (None, None, None)


def get_thread(conn: Conn, thread_id: str) -> Thread | None:
    """The thread's row, None if missing."""
    row = conn.execute(sql.GET_THREAD, (thread_id,)).fetchone()
    return row_thread(row) if row is not None else None


def insert_thread(
    conn: Conn, thread_id: str, agent: str, now: float, parent: tuple[str, int] | None = None
) -> bool:
    """Insert a thread row unless its id exists; whether it was inserted."""
    parent_id, parent_seq = parent if parent is not None else (None, 0)
    conn.execute(sql.INSERT_THREAD, (thread_id, agent, parent_id, parent_seq, now, now))
    return bool(conn.changes())


def retry_thread(conn: Conn, thread_id: str, now: float) -> Thread | None:
    """Make a thread active again and ready if it has input; its new row."""
    conn.execute(sql.RETRY_THREAD, (now, thread_id))
    if conn.changes() == 0:
        return None
    conn.execute(sql.REFRESH_READY, (thread_id,))
    return get_thread(conn, thread_id)


def admit_one(conn: Conn, item: NewInput, now: float) -> Admission:
    """Insert one input (dedup by key), creating its thread when ``item.agent`` is set."""
    if item.agent:
        insert_thread(conn, item.thread_id, item.agent, now)
    key = inbox.sort_key(item, now)
    try:
        conn.execute(
            sql.INSERT_INPUT,
            (
                item.thread_id,
                item.dedup_key,
                item.kind,
                int(item.priority),
                item.not_before,
                now,
                key,
                item.content,
                item.call_id,
                item.tool_name,
                int(item.is_error),
                item.source,
                encode_parts(item.parts),
            ),
        )
    except apsw.ConstraintError as exc:
        if "FOREIGN KEY" in str(exc):
            raise NotFound(f"no thread {item.thread_id!r} (pass an agent to create it)") from None
        raise
    input_id = conn.last_insert_rowid()
    # the dedup key decides; a duplicate (rare) takes its just-inserted row back out
    conn.execute(sql.INSERT_INPUT_KEY, (item.thread_id, item.dedup_key, input_id, now, item.fingerprint))
    if conn.changes() == 0:
        conn.execute(sql.DELETE_INPUT, (input_id,))
        known = conn.execute(sql.INPUT_OF_KEY, (item.thread_id, item.dedup_key)).fetchone()
        if item.fingerprint is not None and known[1] is not None and known[1] != item.fingerprint:
            raise IdempotencyMismatch(  # the job's savepoint undoes the whole batch
                f"the dedup key of thread {item.thread_id!r} was used with a different request"
            )
        return Admission(
            input_id=known[0], thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=True
        )
    conn.execute(sql.MARK_READY, (key, item.not_before, item.thread_id, item.kind))
    if item.tools is not None:
        conn.execute(sql.SET_CLIENT_TOOLS, (item.tools, item.thread_id))
    return Admission(input_id=input_id, thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=False)


def check_lease(conn: Conn, thread_id: str, token: str) -> None:
    """NotFound if the thread is gone, LeaseLost if ``token`` no longer holds it."""
    row = conn.execute(sql.LEASE_TOKEN, (thread_id,)).fetchone()
    if row is None:
        raise NotFound(f"no thread {thread_id!r}")
    if row[0] != token:
        raise LeaseLost(f"lease on thread {thread_id!r} was lost before commit")


def apply_plan(conn: Conn, plan: CommitPlan, now: float) -> None:
    """Apply a checked slice plan (see :meth:`Backend.apply_plan`)."""
    messages, summary = plan.messages, plan.summary
    usage = plan.usage or Usage()
    if plan.consumed:
        conn.execute(sql.delete_consumed(len(plan.consumed)), (plan.thread_id, *plan.consumed))
        if conn.changes() != len(plan.consumed):
            check_lease(conn, plan.thread_id, plan.token)
            raise StoreError(f"an input consumed by {plan.thread_id!r} is not pending")
    finish = {
        "tokens": sum(m.tokens for m in messages),
        "usage_prompt": usage.prompt,
        "usage_completion": usage.completion,
        "usage_cached": usage.cached,
        "upto": summary.upto_seq if summary else None,
        "covered": summary.covered_tokens if summary else None,
        "first_seq": messages[0].seq if messages else None,
        "last_seq": messages[-1].seq if messages else None,
        "awaiting": plan.awaiting,
        "runs": plan.runs,
        # the row's journal state: the slice's, or unknown (NULL) once changes it did not give
        "state_set": plan.state_json is not None or bool(plan.state),
        "state": plan.state_json,
        "subject": plan.subject,
        "now": now,
        "id": plan.thread_id,
        "token": plan.token,
    }
    conn.execute(sql.FINISH_SLICE, finish)
    if conn.changes() != 1:
        # raised after writes: the writer re-runs the batch with savepoints,
        # so this job's changes are rolled back and nothing else's
        check_lease(conn, plan.thread_id, plan.token)
        raise StoreError(
            f"the plan of {plan.thread_id!r} does not fit its stored state (its messages do not "
            "continue the history, or its summary does not move forward over stored messages)"
        )
    if summary is not None:
        conn.execute(
            sql.INSERT_SUMMARY,
            (
                plan.thread_id,
                summary.upto_seq,
                summary.made_at_seq,
                summary.content,
                summary.tokens,
                summary.covered_tokens,
                summary.created_at or now,
            ),
        )
    if messages:
        conn.executemany(
            sql.INSERT_MESSAGE,
            [
                (
                    plan.thread_id,
                    m.seq,
                    m.role,
                    m.content,
                    sql.encode(m.tool_calls).decode() if m.tool_calls else None,
                    m.tool_call_id,
                    m.name,
                    m.source,
                    m.input_id,
                    m.created_at or now,
                    m.tokens,
                    m.finish_reason,
                    m.reasoning,
                    *((m.usage.prompt, m.usage.completion, m.usage.cached) if m.usage else _NO_USAGE),
                    encode_parts(m.parts),
                )
                for m in messages
            ],
        )
    if plan.calls:
        conn.executemany(
            sql.INSERT_CALL,
            [
                (
                    plan.thread_id,
                    c.call_id,
                    c.tool,
                    c.arguments,
                    int(c.idempotent),
                    now,
                    now,
                    "external" if c.external else "pending",
                )
                for c in plan.calls
            ],
        )
    if plan.approvals:
        conn.executemany(
            approvals_sql.INSERT,
            [
                (
                    *(plan.thread_id, a.call_id, a.kind, a.tool, a.arguments, int(a.idempotent)),
                    *(a.role, a.deadline, a.escalate_role, a.escalate_s, now),
                )
                for a in plan.approvals
            ],
        )
    if plan.state:
        top = conn.execute(journal_sql.JOURNAL_TOP, (plan.thread_id,)).fetchone()[0]
        run, last = conn.execute(journal_sql.THREAD_RUNS_SEQ, (plan.thread_id,)).fetchone()
        conn.executemany(
            journal_sql.INSERT_CHANGE,
            [
                (plan.thread_id, top + 1 + n, c.op, c.key, c.value, run, now, last)
                for n, c in enumerate(plan.state)
            ],
        )
    for child in plan.threads:
        if not insert_thread(conn, child.id, child.agent, now, (child.parent_id, child.parent_seq)):
            raise StoreError(f"thread {child.id!r} spawned by {plan.thread_id!r} exists already")
    for item in plan.admissions:
        admit_one(conn, item, now)


def release(
    conn: Conn,
    claim: Claim,
    now: float,
    retry_at: float,
    error: str | None,
    fail: bool,
    wait: str | None = None,
) -> None:
    """Clear a lease still held (see :meth:`Backend.release`)."""
    conn.execute(
        sql.RELEASE,
        (retry_at, 0 if error else -1, error, int(fail), now, claim.thread_id, claim.token, wait),
    )
    if fail:
        conn.execute(sql.REFRESH_READY, (claim.thread_id,))


def expire_leases_of(conn: Conn, workers: Sequence[str]) -> int:
    """Let the leases of dead ``workers`` expire now; how many threads and calls they held."""
    count = 0
    for worker in workers:
        conn.execute(sql.EXPIRE_THREADS_OF, (worker,))
        count += conn.changes()
        conn.execute(sql.EXPIRE_CALLS_OF, (worker,))
        count += conn.changes()
    return count


def renew(conn: Conn, claims: Sequence[Claim], expires: float) -> list[Claim]:
    """Extend the leases still held until ``expires``; the renewed claims."""
    kept = []
    for claim in claims:
        conn.execute(sql.RENEW_LEASE, (expires, claim.thread_id, claim.token))
        if conn.changes():
            kept.append(msgspec.structs.replace(claim, expires_at=expires))
    return kept


def delete_threads(conn: Conn, thread_id: str, now: float) -> list[str]:
    """Delete a thread, its descendants, their rows and the blobs left unreferenced."""
    if conn.execute(sql.THREAD_EXISTS, (thread_id,)).fetchone() is None:
        raise NotFound(f"no thread {thread_id!r}")
    tree, level = [thread_id], [thread_id]
    while level:  # one pass over threads per generation
        level = [r[0] for r in conn.execute(sql.CHILDREN, (json.dumps(level),))]
        tree.extend(level)
    ids = json.dumps(tree)
    leased = conn.execute(sql.LEASED_AMONG, (ids, now)).fetchone()
    if leased is not None:
        raise InvalidInput(f"thread {leased[0]!r} is running a slice; delete it once the slice ends")
    refs = {r[0] for r in conn.execute(sql.DROP_REFS_OF, (ids,))}
    for statement in sql.DROP_ROWS_OF:
        conn.execute(statement, (ids,))
    conn.execute(sql.DROP_THREADS, (ids,))
    for ref in sorted(refs):
        if conn.execute(sql.REF_USED, (ref,)).fetchone() is None:
            conn.execute(sql.DROP_CHUNKS, (ref,))
            conn.execute(sql.DROP_BLOB, (ref,))
    return tree
