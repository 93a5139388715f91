"""Every SQL statement of the SQLite backend, by name.

The schema of a new database is ``schema.sql`` and the migrations of older ones are
``migrations/NNNN_name.sql`` (run by :mod:`dormant.store.migrations`); the backend's
other modules run only the statements named here.
"""

from __future__ import annotations

from functools import lru_cache

import msgspec

from ..rows import INPUT_COLS, MESSAGE_COLS, OUTBOX_COLS, SUMMARY_COLS, THREAD_COLS, THREAD_TABLES

encode = msgspec.json.encode

# A claimed thread's row and its ready inputs, at most ?3 of them, in admission order, and
# no more input text than ?4 bytes (the first input always): the sizes come from
# octet_length, which reads no text, so no input past the cut is read at all.
LOAD_SLICE = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}, t.state
FROM threads t
LEFT JOIN (
    SELECT x.id, row_number() OVER w AS n, sum(octet_length(x.content)) OVER w AS upto
    FROM inputs x
    WHERE x.thread_id = ?2 AND x.not_before <= ?1
      AND (x.kind = 'tool_result' OR (SELECT awaiting FROM threads WHERE id = ?2) = 0)
    WINDOW w AS (ORDER BY x.id)
    ORDER BY x.id LIMIT ?3
) b ON b.n = 1 OR b.upto <= ?4
LEFT JOIN inputs i ON i.id = b.id
WHERE t.id = ?2
ORDER BY b.id
"""

# LOAD_SLICE for every thread of a claim batch at once (?2: a JSON array of thread ids),
# at most ?3 inputs per thread; rows come grouped by thread, inputs in admission order.
LOAD_SLICES = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}, t.state
FROM threads t
LEFT JOIN inputs i ON i.id IN (
    SELECT x.id FROM inputs x
    WHERE x.thread_id = t.id AND x.not_before <= ?1 AND (t.awaiting = 0 OR x.kind = 'tool_result')
    ORDER BY x.id LIMIT ?3)
WHERE t.id IN (SELECT value FROM json_each(?2))
ORDER BY t.id, i.id
"""

# Recompute a thread's readiness from its consumable pending inputs.
REFRESH_READY = """
UPDATE threads SET
  ready_key = CASE WHEN status = 'active' THEN (
      SELECT MIN(i.sort_key) FROM inputs i
      WHERE i.thread_id = threads.id AND (threads.awaiting = 0 OR i.kind = 'tool_result')) END,
  ready_at = CASE WHEN status = 'active' THEN (
      SELECT MIN(i.not_before) FROM inputs i
      WHERE i.thread_id = threads.id AND (threads.awaiting = 0 OR i.kind = 'tool_result')) END
WHERE id = ?
"""
# The claim, fair across tenants (the rule: dormant.store.fairness), in four statements
# of one write transaction, each an index walk:
# * the tenants with a ready thread ('' for the library's threads), one probe each (a
#   skip scan of threads_ready, ordered by tenant, then ready_key);
# * the live leases of each tenant (threads_leased holds only leased rows);
# * each tenant's best :limit claimable threads by ready_key (one index range);
# * the lease of the ids fairness.pick chose.
# One statement doing all four (a recursive CTE, a correlated IN, a window) measured 3-5x
# slower here than these together, for one tenant as for many.
READY_TENANTS = """
WITH RECURSIVE ready_tenants(tenant) AS (
    SELECT (SELECT min(tenant) FROM threads WHERE ready_key IS NOT NULL)
    UNION ALL
    SELECT (SELECT min(t.tenant) FROM threads t
            WHERE t.ready_key IS NOT NULL AND t.tenant > ready_tenants.tenant)
    FROM ready_tenants WHERE ready_tenants.tenant IS NOT NULL
)
SELECT tenant FROM ready_tenants WHERE tenant IS NOT NULL
"""
LEASES_BY_TENANT = """
SELECT tenant, COUNT(*) FROM threads WHERE lease_token IS NOT NULL AND lease_expires > ? GROUP BY tenant
"""
TENANT_CLAIMABLE = """
SELECT id, ready_key FROM threads
WHERE tenant = :tenant AND ready_key IS NOT NULL AND ready_at <= :now AND lease_expires <= :now
  AND (:agents IS NULL OR agent IN (SELECT value FROM json_each(:agents)))
ORDER BY ready_key LIMIT :limit
"""
LEASE_THREADS = """
UPDATE threads SET lease_token = :token, lease_owner = :worker, lease_expires = :expires,
    failures = failures + 1
WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, agent, failures
"""
CLAIM_OUTBOX = f"""
UPDATE outbox SET status = 'running', attempts = attempts + 1, lease_token = :token,
                  lease_owner = :worker, lease_expires = :expires
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND available_at <= :now
      AND (:tools IS NULL OR agent || char(31) || tool IN (SELECT value FROM json_each(:tools)))
    ORDER BY available_at LIMIT :limit)
RETURNING {OUTBOX_COLS}
"""
# No RETURNING id: the store reads last_insert_rowid() instead. On this SQLite an
# INSERT ... RETURNING costs ~20 us more than the insert itself (measured), and the hot
# path admits two inputs per turn. The same holds, less so, for FINISH_SLICE below.
INSERT_INPUT = """
INSERT INTO inputs (thread_id, dedup_key, kind, priority, not_before, admitted_at, sort_key,
                    content, call_id, tool_name, is_error, source, parts)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
# Messages are written to message_rows under their thread's number (rid) and read
# through the messages view (schema.sql); a missing thread fails on thread_rid NOT NULL.
THREAD_RID = "(SELECT rid FROM threads WHERE id = ?)"
INSERT_MESSAGE = f"""
INSERT INTO message_rows (thread_rid, seq, role, content, tool_calls, tool_call_id, name, source,
                          input_id, created_at, tokens, finish_reason, reasoning, usage_prompt,
                          usage_completion, usage_cached, parts)
VALUES ({THREAD_RID}, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_SUMMARY = """
INSERT INTO summaries (thread_id, upto_seq, made_at_seq, content, tokens, covered_tokens, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
# The newest messages of a thread in (min_seq, max_seq], newest first: a view's read.
# A view never holds reasoning (the model is not shown it again; it would escape the
# view's byte bound): NULL in its place.
VIEW_MESSAGE_COLS = MESSAGE_COLS.replace("reasoning", "NULL")
# A count made on read, written back where the message is still uncounted.
STORE_COUNTS = (
    f"UPDATE message_rows SET tokens = ? WHERE thread_rid = {THREAD_RID} AND seq = ? "
    "AND coalesce(tokens, 0) = 0"
)
# The hot reads name message_rows and the thread's number themselves: through the
# messages view's join the same read took ~25 % longer (measured on a 20,000-agent file).
NEWEST_MESSAGES = f"""
SELECT {VIEW_MESSAGE_COLS} FROM message_rows WHERE thread_rid = {THREAD_RID} AND seq <= ? AND seq > ?
ORDER BY seq DESC LIMIT ?
"""
SUMMARY_AT = f"SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = ? AND upto_seq = ?"
# The latest summary a child spawned at parent_seq ?2 inherited from thread ?1.
SUMMARY_INHERITED = f"""
SELECT {SUMMARY_COLS} FROM summaries WHERE thread_id = ?1 AND made_at_seq <= ?2
ORDER BY upto_seq DESC LIMIT 1
"""
INSERT_CALL = """
INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at,
                    created_at, status)
VALUES (?1, (SELECT agent FROM threads WHERE id = ?1), ?2, ?3, ?4, ?5, ?6, ?7, ?8)
"""
# An admitted input that carried the client's tools sets them on its thread ('[]': none).
SET_CLIENT_TOOLS = "UPDATE threads SET client_tools = nullif(?, '[]') WHERE id = ?"
# Release a committed slice's lease and recompute readiness with the new awaiting count
# (:awaiting, not the column: SET expressions see the row's old values).
# A summary (:upto not NULL) must move forward and cover only stored messages.
FINISH_SLICE = """
UPDATE threads SET
  last_seq = coalesce(:last_seq, last_seq), awaiting = :awaiting, failures = 0, error = NULL,
  lease_token = NULL, lease_owner = NULL, lease_expires = 0, updated_at = :now,
  tokens = tokens + :tokens, runs = runs + :runs,
  usage_prompt = usage_prompt + :usage_prompt, usage_completion = usage_completion + :usage_completion,
  usage_cached = usage_cached + :usage_cached, wait_reason = NULL, wait_until = 0,
  summary_seq = coalesce(:upto, summary_seq),
  summarized_tokens = coalesce(:covered, summarized_tokens),
  state = CASE WHEN :state_set THEN :state ELSE state END, subject = coalesce(:subject, subject),
  (ready_key, ready_at) = (SELECT MIN(i.sort_key), MIN(i.not_before) FROM inputs i
                           WHERE i.thread_id = :id AND (:awaiting = 0 OR i.kind = 'tool_result'))
WHERE id = :id AND lease_token = :token AND (:first_seq IS NULL OR last_seq = :first_seq - 1)
  AND (:upto IS NULL OR (:upto > summary_seq AND :upto <= last_seq))
"""
MARK_READY = """
UPDATE threads SET ready_key = min(coalesce(ready_key, ?1), ?1),
                   ready_at = min(coalesce(ready_at, ?2), ?2)
WHERE id = ?3 AND status = 'active' AND (awaiting = 0 OR ?4 = 'tool_result')
"""


# -- connections and schema -----------------------------------------------------------

PRAGMA_PAGE_SIZE = "PRAGMA page_size={:d}"
PRAGMA_WAL = "PRAGMA journal_mode=WAL"
PRAGMA_CACHE_KIB = "PRAGMA cache_size=-{:d}"
PRAGMA_SYNCHRONOUS = "PRAGMA synchronous={}"
PRAGMA_FOREIGN_KEYS = "PRAGMA foreign_keys=ON"
PRAGMA_MAX_PAGE_COUNT = "PRAGMA max_page_count={:d}"
BEGIN_IMMEDIATE = "BEGIN IMMEDIATE"
COMMIT = "COMMIT"
ROLLBACK = "ROLLBACK"
SAVEPOINT = "SAVEPOINT job"
RELEASE_SAVEPOINT = "RELEASE job"
ROLLBACK_TO_SAVEPOINT = "ROLLBACK TO job"
HAS_VERSION_TABLE = "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
GET_VERSION = "SELECT version FROM schema_version"
INSERT_VERSION = "INSERT INTO schema_version (version) VALUES (?)"
SET_VERSION = "UPDATE schema_version SET version = ?"

# -- threads --------------------------------------------------------------------------

# Every thread row is inserted by this one statement (a root: parent NULL, 0).
INSERT_THREAD = """
INSERT INTO threads (id, agent, parent_id, parent_seq, created_at, updated_at, rid)
VALUES (?, ?, ?, ?, ?, ?, (SELECT coalesce(max(rid), 0) + 1 FROM threads))
ON CONFLICT (id) DO NOTHING
"""
GET_THREAD = f"SELECT {THREAD_COLS} FROM threads WHERE id = ?"
# a new thread's journal state and subject on its row (see rows.state_row)
SET_THREAD_STATE = "UPDATE threads SET state = ?, subject = ? WHERE id = ?"
THREAD_EXISTS = "SELECT 1 FROM threads WHERE id = ?"
#: Bytes of the parts a thread took since ?2: its pending inputs admitted since, and its
#: messages written since (a consumed input is deleted as its message is written).
PART_BYTES_SINCE = """
SELECT coalesce(sum(json_extract(p.value, '$.size')), 0) FROM (
    SELECT parts FROM inputs WHERE thread_id = ?1 AND parts IS NOT NULL AND admitted_at >= ?2
    UNION ALL
    SELECT parts FROM messages WHERE thread_id = ?1 AND parts IS NOT NULL AND created_at >= ?2
) AS x, json_each(x.parts) AS p
"""
PARENT_OF = "SELECT parent_id, parent_seq FROM threads WHERE id = ?"
LEASE_TOKEN = "SELECT lease_token FROM threads WHERE id = ?"
# A live lease is left alone: the slice running under it keeps its thread.
RETRY_THREAD = """
UPDATE threads SET status = 'active', failures = 0, error = NULL, updated_at = ?1,
    wait_reason = NULL, wait_until = 0,
    lease_expires = CASE WHEN lease_token IS NOT NULL AND lease_expires > ?1 THEN lease_expires ELSE 0 END
WHERE id = ?2
"""
# The claim counted an attempt (failures + 1); a release without an error gives it back.
# A wait reason (the model endpoint is down) is kept until the thread's next release,
# commit or retry; its until is the retry time.
RELEASE = """
UPDATE threads SET lease_token = NULL, lease_owner = NULL, lease_expires = ?1,
    failures = max(0, failures + ?2), error = coalesce(?3, error),
    status = CASE WHEN ?4 THEN 'failed' ELSE status END, updated_at = ?5,
    wait_reason = ?8, wait_until = CASE WHEN ?8 IS NULL THEN 0 ELSE ?1 END
WHERE id = ?6 AND lease_token = ?7
"""
RENEW_LEASE = "UPDATE threads SET lease_expires = ? WHERE id = ? AND lease_token = ?"
# The model endpoint a thread waits on answers again: claimable now (a held lease is left alone).
WAKE_WAITING = """
UPDATE threads SET lease_expires = ?1, wait_until = ?1
WHERE wait_reason IS NOT NULL AND lease_token IS NULL AND lease_expires > ?1 AND instr(wait_reason, ?2) > 0
"""
# The leases of a worker proven dead (its lock file taken, see owners.py) expire now:
# its threads are claimable at once, its running calls are reconciled by the next
# outbox claim (idempotent: pending again; others: outcome unknown).
EXPIRE_THREADS_OF = "UPDATE threads SET lease_expires = 0 WHERE lease_owner = ? AND lease_token IS NOT NULL"
EXPIRE_CALLS_OF = "UPDATE outbox SET lease_expires = 0 WHERE lease_owner = ? AND status = 'running'"

# -- inputs ---------------------------------------------------------------------------

INSERT_INPUT_KEY = """
INSERT INTO input_keys (thread_id, dedup_key, input_id, admitted_at, fingerprint) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (thread_id, dedup_key) DO NOTHING
"""
INPUT_OF_KEY = "SELECT input_id, fingerprint FROM input_keys WHERE thread_id = ? AND dedup_key = ?"
DELETE_INPUT = "DELETE FROM inputs WHERE id = ?"


@lru_cache(maxsize=64)
def delete_consumed(count: int) -> str:
    """The statement deleting ``count`` consumed inputs (thread id, then the input ids)."""
    return f"DELETE FROM inputs WHERE thread_id = ? AND id IN ({','.join('?' * count)})"


# -- outbox ---------------------------------------------------------------------------

EXPIRED_CALLS = """
SELECT id, thread_id, call_id, tool, idempotent FROM outbox
WHERE status = 'running' AND lease_expires <= ? ORDER BY lease_expires LIMIT 256
"""
CALL_PENDING_AGAIN = """
UPDATE outbox SET status = 'pending', available_at = ?, lease_token = NULL, lease_owner = NULL,
    lease_expires = 0
WHERE id = ?
"""
CALL_UNKNOWN = """
UPDATE outbox SET status = 'unknown', finished_at = ?, lease_token = NULL, lease_owner = NULL,
    last_error = 'lease expired while running'
WHERE id = ?
"""
TAKE_OPEN_CALL = """
DELETE FROM outbox WHERE thread_id = ? AND call_id = ?
  AND status IN ('pending', 'running', 'external')
RETURNING tool
"""
CALL_RETRY = """
UPDATE outbox SET status = 'pending', available_at = ?, last_error = ?, lease_token = NULL,
    lease_owner = NULL, lease_expires = 0
WHERE id = ? AND status = 'running' AND lease_token = ?
"""
CALL_DONE = """
DELETE FROM outbox WHERE id = ? AND status = 'running' AND lease_token = ?
RETURNING thread_id, call_id, tool
"""
CALL_DEAD = """
UPDATE outbox SET status = 'dead', finished_at = ?, last_error = ?, lease_token = NULL,
    lease_owner = NULL, lease_expires = 0
WHERE id = ? AND status = 'running' AND lease_token = ?
RETURNING thread_id, call_id, tool
"""

# -- reads ----------------------------------------------------------------------------

HISTORY_ASC = (
    f"SELECT {MESSAGE_COLS} FROM message_rows WHERE thread_rid = {THREAD_RID} AND seq > ? "
    "ORDER BY seq LIMIT ?"
)
HISTORY_DESC = (
    f"SELECT {MESSAGE_COLS} FROM message_rows WHERE thread_rid = {THREAD_RID} AND seq < ? "
    "ORDER BY seq DESC LIMIT ?"
)
THREAD_PAGE = f"SELECT {THREAD_COLS} FROM threads WHERE id > ? ORDER BY id LIMIT ?"
RESOLVE_CALL = f"DELETE FROM outbox WHERE id = ? AND status IN ('dead', 'unknown') RETURNING {OUTBOX_COLS}"
OUTBOX_PAGE = f"""
SELECT {OUTBOX_COLS} FROM outbox WHERE id > ?1 AND (?2 IS NULL OR status = ?2) ORDER BY id LIMIT ?3
"""
HAS_WORK = """
SELECT EXISTS (SELECT 1 FROM threads WHERE ready_key IS NOT NULL AND ready_at <= ?1
                 AND (?2 IS NULL OR agent IN (SELECT value FROM json_each(?2))))
    OR EXISTS (SELECT 1 FROM threads WHERE lease_token IS NOT NULL)
    OR EXISTS (SELECT 1 FROM outbox WHERE status IN ('pending', 'running'))
"""
THREADS_BY_STATUS = "SELECT status, COUNT(*) FROM threads GROUP BY status"
THREADS_READY = "SELECT COUNT(*) FROM threads WHERE ready_key IS NOT NULL AND ready_at <= ?"
THREADS_LEASED = "SELECT COUNT(*) FROM threads WHERE lease_token IS NOT NULL"
READY_BY_AGENT = """
SELECT agent, COUNT(*) AS n FROM threads
WHERE ready_key IS NOT NULL AND ready_at <= ? AND lease_expires <= ?
GROUP BY agent ORDER BY n DESC, agent LIMIT ?
"""
INPUTS_BY_PRIORITY = "SELECT priority, COUNT(*) FROM inputs GROUP BY priority"
OUTBOX_BY_STATUS = "SELECT status, COUNT(*) FROM outbox GROUP BY status"
MESSAGE_COUNT = "SELECT COUNT(*) FROM message_rows"
USAGE_TOTALS = "SELECT total(usage_prompt), total(usage_completion), total(usage_cached) FROM threads"
# threads_waiting indexes only the waiting threads: no scan of the others
WAITING = "SELECT COUNT(*), max(wait_until) FROM threads WHERE wait_reason IS NOT NULL"
WAITING_BY_REASON = """
SELECT wait_reason, COUNT(*) AS n FROM threads WHERE wait_reason IS NOT NULL
GROUP BY wait_reason ORDER BY n DESC, wait_reason LIMIT ?
"""

# -- deleting threads -----------------------------------------------------------------

IN_IDS = "(SELECT value FROM json_each(?))"
CHILDREN = f"SELECT id FROM threads WHERE parent_id IN {IN_IDS}"
LEASED_AMONG = f"""
SELECT id FROM threads WHERE id IN {IN_IDS} AND lease_token IS NOT NULL AND lease_expires > ? LIMIT 1
"""
DROP_REFS_OF = f"DELETE FROM blob_refs WHERE thread_id IN {IN_IDS} RETURNING ref"
#: one statement per table whose rows belong to a thread (rows.THREAD_TABLES)
DROP_ROWS_OF = tuple(
    f"DELETE FROM message_rows WHERE thread_rid IN (SELECT rid FROM threads WHERE id IN {IN_IDS})"
    if table == "messages"
    else f"DELETE FROM {table} WHERE thread_id IN {IN_IDS}"
    for table in THREAD_TABLES
)
DROP_THREADS = f"DELETE FROM threads WHERE id IN {IN_IDS}"
REF_USED = "SELECT 1 FROM blob_refs WHERE ref = ? LIMIT 1"

# -- blobs ----------------------------------------------------------------------------

INSERT_CHUNK = "INSERT INTO blob_chunks (ref, idx, data) VALUES (?, ?, ?)"
INSERT_REF = "INSERT INTO blob_refs (thread_id, ref) VALUES (?, ?) ON CONFLICT DO NOTHING"
BLOB_SIZE = "SELECT size FROM blobs WHERE ref = ?"
# Start (or adopt) the move of a new blob's chunks: an invisible row, size -1.
MARK_BLOB = """
INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (?1, -1, ?2, ?3)
ON CONFLICT (ref) DO UPDATE SET created_at = excluded.created_at WHERE blobs.size < 0
"""
MOVE_CHUNKS = "UPDATE OR IGNORE blob_chunks SET ref = ?1 WHERE ref = ?2 AND idx >= ?3 AND idx < ?4"
DROP_CHUNK_RANGE = "DELETE FROM blob_chunks WHERE ref = ?1 AND idx >= ?2 AND idx < ?3"
DROP_CHUNKS = "DELETE FROM blob_chunks WHERE ref = ?"
DROP_BLOB = "DELETE FROM blobs WHERE ref = ?"
COUNT_CHUNKS = "SELECT count(*) FROM blob_chunks WHERE ref = ?"
COMPLETE_BLOB = """
INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (ref) DO UPDATE SET size = excluded.size, chunk_size = excluded.chunk_size,
    created_at = excluded.created_at
WHERE blobs.size < 0
"""
# The blob if the thread or one of its ancestors refers to it (complete blobs only).
VISIBLE_BLOB = """
WITH RECURSIVE line (id, parent_id) AS (
    SELECT id, parent_id FROM threads WHERE id = ?1
    UNION ALL
    SELECT t.id, t.parent_id FROM threads t JOIN line ON t.id = line.parent_id
)
SELECT b.size, b.chunk_size FROM blobs b
WHERE b.ref = ?2 AND b.size >= 0
  AND EXISTS (SELECT 1 FROM line JOIN blob_refs r ON r.thread_id = line.id AND r.ref = ?2)
"""
CHUNK_ROWS = "SELECT id, idx FROM blob_chunks WHERE ref = ? AND idx >= ? AND idx < ? ORDER BY idx"
SWEEP_TMP_CHUNKS = "DELETE FROM blob_chunks WHERE ref >= ? AND ref < ?"
STALE_MARKERS = "SELECT ref FROM blobs WHERE size < 0 AND created_at < ?"


# -- dormant doctor (read-only) -------------------------------------------------------

DOCTOR_PROBE = "SELECT 1 FROM sqlite_master LIMIT 1"
DOCTOR_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
DOCTOR_CHECK = "PRAGMA {}(20)"  # quick_check or integrity_check
DOCTOR_FOREIGN_KEYS = "PRAGMA foreign_key_check"
DOCTOR_PAGE_SIZE = "PRAGMA page_size"
DOCTOR_PAGE_COUNT = "PRAGMA page_count"
DOCTOR_FREELIST = "PRAGMA freelist_count"
DOCTOR_VERSION = "SELECT max(version) FROM schema_version"
DOCTOR_THREADS = "SELECT COUNT(*) FROM threads"
DOCTOR_FAILED = "SELECT COUNT(*) FROM threads WHERE status = 'failed'"
DOCTOR_FAILED_SAMPLE = (
    "SELECT id, failures, error FROM threads WHERE status = 'failed' ORDER BY updated_at DESC LIMIT ?"
)
_EXPIRED = "lease_token IS NOT NULL AND lease_expires <= ?"
DOCTOR_EXPIRED = f"SELECT COUNT(*) FROM threads WHERE {_EXPIRED}"
DOCTOR_EXPIRED_SAMPLE = f"SELECT id, lease_owner FROM threads WHERE {_EXPIRED} ORDER BY lease_expires LIMIT ?"
# ready_key is when the oldest ready input became claimable (plus at most a minute of
# priority aging): older than ?1 and not leased means no worker took it
DOCTOR_OVERDUE_THREADS = (
    "SELECT COUNT(*) FROM threads WHERE ready_key IS NOT NULL AND ready_key <= ? AND lease_expires <= ?"
)
DOCTOR_EXPIRED_CALLS = "SELECT COUNT(*) FROM outbox WHERE status = 'running' AND lease_expires <= ?"
DOCTOR_OVERDUE_CALLS = "SELECT COUNT(*) FROM outbox WHERE status = 'pending' AND available_at <= ?"
# a dead-lettered or unknown call must have had its (error) result admitted to its
# thread in the same transaction: its dedup key (the call id) is then known
_UNDELIVERED = (
    "FROM outbox o WHERE o.status IN ('dead', 'unknown') AND NOT EXISTS "
    "(SELECT 1 FROM input_keys k WHERE k.thread_id = o.thread_id AND k.dedup_key = o.call_id)"
)
DOCTOR_UNDELIVERED = f"SELECT COUNT(*) {_UNDELIVERED}"
DOCTOR_UNDELIVERED_SAMPLE = f"SELECT o.thread_id, o.call_id, o.status {_UNDELIVERED} ORDER BY o.id LIMIT ?"
# a thread waits for `awaiting` results: each is an open call, a call waiting for a
# person's decision, or an admitted result
_STALLED = """
FROM (
    SELECT t.id, t.awaiting,
        (SELECT COUNT(*) FROM outbox o WHERE o.thread_id = t.id
         AND o.status IN ('pending', 'running', 'external'))
      + (SELECT COUNT(*) FROM approvals a WHERE a.thread_id = t.id AND a.status IN ('requested', 'escalated'))
      + (SELECT COUNT(*) FROM inputs i WHERE i.thread_id = t.id AND i.kind = 'tool_result') AS n
    FROM threads t WHERE t.awaiting > 0)
WHERE awaiting > n
"""
DOCTOR_STALLED = f"SELECT COUNT(*) {_STALLED}"
DOCTOR_STALLED_SAMPLE = f"SELECT id, awaiting, n {_STALLED} ORDER BY id LIMIT ?"

# -- tenants and API keys --------------------------------------------------------------

INSERT_TENANT = (
    "INSERT INTO tenants (id, name, created_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING RETURNING id"
)
FIND_TENANT = (
    "SELECT id, name, created_at FROM tenants WHERE id = ?1 OR name = ?1 ORDER BY id = ?1 DESC LIMIT 1"
)
TENANT_PAGE = "SELECT id, name, created_at FROM tenants WHERE name > ? ORDER BY name LIMIT ?"
INSERT_KEY = "INSERT INTO api_keys (id, tenant_id, salt, digest, created_at) VALUES (?, ?, ?, ?, ?)"
REVOKE_KEY = "UPDATE api_keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL"
GET_KEY = "SELECT id, tenant_id, created_at, revoked_at FROM api_keys WHERE id = ?"
KEY_PAGE = (
    "SELECT id, tenant_id, created_at, revoked_at FROM api_keys WHERE tenant_id = ? AND id > ? "
    "ORDER BY id LIMIT ?"
)
LIVE_KEY = (
    "SELECT k.salt, k.digest, t.id, t.name, t.created_at FROM api_keys k "
    "JOIN tenants t ON t.id = k.tenant_id WHERE k.id = ? AND k.revoked_at IS NULL"
)

# One tenant's counts for its status (threads.tenant, children included).
TENANT_THREADS_BY_STATUS = "SELECT status, COUNT(*) FROM threads WHERE tenant = ? GROUP BY status"
TENANT_THREADS_READY = (
    "SELECT COUNT(*) FROM threads WHERE tenant = ?1 AND ready_key IS NOT NULL AND ready_at <= ?2"
)
TENANT_THREADS_LEASED = "SELECT COUNT(*) FROM threads WHERE tenant = ? AND lease_token IS NOT NULL"
TENANT_USAGE_TOTALS = (
    "SELECT total(usage_prompt), total(usage_completion), total(usage_cached) FROM threads WHERE tenant = ?"
)
TENANT_WAITING = "SELECT COUNT(*), max(wait_until) FROM threads WHERE wait_reason IS NOT NULL AND tenant = ?"
TENANT_WAITING_BY_REASON = """
SELECT wait_reason, COUNT(*) AS n FROM threads
WHERE wait_reason IS NOT NULL AND tenant = ? GROUP BY wait_reason ORDER BY n DESC, wait_reason LIMIT ?
"""
TENANT_INPUTS_BY_PRIORITY = (
    "SELECT i.priority, COUNT(*) FROM inputs i JOIN threads t ON t.id = i.thread_id "
    "WHERE t.tenant = ? GROUP BY i.priority"
)
TENANT_OUTBOX_BY_STATUS = (
    "SELECT o.status, COUNT(*) FROM outbox o JOIN threads t ON t.id = o.thread_id "
    "WHERE t.tenant = ? GROUP BY o.status"
)
TENANT_MESSAGE_COUNT = (
    "SELECT COUNT(*) FROM messages m JOIN threads t ON t.id = m.thread_id WHERE t.tenant = ?"
)

# HISTORY_ASC/DESC bounded by content bytes: of the first ?3 messages, those whose preceding
# ones hold at most ?4 bytes, and the first two: the read ends with the first message past
# the bound, which tells the core there is more. Sizes come from octet_length: no text past
# the cut is read.
HISTORY_ASC_BYTES = f"""
SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ?1 AND seq IN (
    SELECT seq FROM (
        SELECT seq, sum(size) OVER (ORDER BY seq) - size AS upto, row_number() OVER (ORDER BY seq) AS n FROM (
            SELECT seq, octet_length(content) + coalesce(octet_length(reasoning), 0) AS size FROM messages
            WHERE thread_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3) a) b
    WHERE upto <= ?4 OR n <= 2)
ORDER BY seq
"""
HISTORY_DESC_BYTES = f"""
SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ?1 AND seq IN (
    SELECT seq FROM (
        SELECT seq, sum(size) OVER (ORDER BY seq DESC) - size AS upto,
               row_number() OVER (ORDER BY seq DESC) AS n FROM (
            SELECT seq, octet_length(content) + coalesce(octet_length(reasoning), 0) AS size FROM messages
            WHERE thread_id = ?1 AND seq < ?2 ORDER BY seq DESC LIMIT ?3) a) b
    WHERE upto <= ?4 OR n <= 2)
ORDER BY seq DESC
"""

OLDEST_READY = """
SELECT min(i.admitted_at) FROM inputs i JOIN threads t ON t.id = i.thread_id
WHERE t.status = 'active' AND i.not_before <= ?1 AND (t.awaiting = 0 OR i.kind = 'tool_result')
"""
