"""The SQLite statements of waits for a person (the ``approvals`` table)."""

from __future__ import annotations

#: An approval row's columns, in :func:`dormant.store.sqlite.approvals.row_approval`'s order.
COLS = (
    "id, thread_id, tenant, call_id, kind, tool, arguments, status, role, deadline, escalate_role, "
    "escalate_s, decision_key, decided_by, note, decided_arguments, requested_at, decided_at"
)
INSERT = """
INSERT INTO approvals (thread_id, tenant, call_id, kind, tool, arguments, idempotent, role,
                       deadline, escalate_role, escalate_s, requested_at)
VALUES (?1, (SELECT tenant FROM threads WHERE id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)
"""
PAGE = f"""
SELECT {COLS} FROM approvals
WHERE id > :after AND requested_at <= :before
  AND (:tenant IS NULL OR tenant = :tenant) AND (:thread IS NULL OR thread_id = :thread)
  AND (:tool IS NULL OR tool = :tool) AND (:status IS NULL OR status = :status)
  AND (:open = 0 OR status IN ('requested', 'escalated'))
ORDER BY id LIMIT :limit
"""
GET = f"SELECT {COLS} FROM approvals WHERE thread_id = ? AND call_id = ?"
DUE = f"""
SELECT {COLS} FROM approvals
WHERE status IN ('requested', 'escalated') AND deadline > 0 AND deadline <= ?
ORDER BY deadline LIMIT ?
"""
OPEN = """
SELECT count(*), min(requested_at) FROM approvals
WHERE status IN ('requested', 'escalated') AND (?1 IS NULL OR tenant = ?1)
"""
DECIDE = """
UPDATE approvals SET status = :status, decision_key = :key, decided_by = :by, note = :note,
    decided_arguments = :arguments, decided_at = :now
WHERE thread_id = :thread AND call_id = :call AND status IN ('requested', 'escalated')
RETURNING idempotent
"""
ESCALATE = """
UPDATE approvals SET status = 'escalated', role = :role, deadline = :deadline,
    escalate_role = NULL, escalate_s = 0
WHERE thread_id = :thread AND call_id = :call AND status = 'requested'
RETURNING idempotent
"""
