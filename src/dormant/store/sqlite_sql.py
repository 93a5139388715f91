"""The SQLite backend's SQL: named statements, row converters, error translation.

The schema itself is ``sqlite_schema.sql``; this module holds the statements the
store runs on its hot path and the functions that turn rows into records.
"""

from __future__ import annotations

import os

import apsw
import msgspec

from ..errors import (
    DormantError,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    UsageError,
)
from .rows import INPUT_COLS, MESSAGE_COLS, OUTBOX_COLS, SUMMARY_COLS, THREAD_COLS

SCHEMA_VERSION = 2
#: Ordered migrations: (version reached, SQL). A new database runs the schema file.
MIGRATIONS: list[tuple[int, str]] = [
    (
        2,
        # token counts, compaction summaries, blobs (issue 4). Messages written before
        # keep tokens NULL: views estimate them from their length.
        """
ALTER TABLE threads ADD COLUMN tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN summarized_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN summary_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE messages ADD COLUMN tokens INTEGER;
CREATE INDEX threads_parent ON threads (parent_id) WHERE parent_id IS NOT NULL;
CREATE TABLE summaries (
    thread_id      TEXT NOT NULL REFERENCES threads(id),
    upto_seq       INTEGER NOT NULL,
    made_at_seq    INTEGER NOT NULL,
    content        TEXT NOT NULL,
    tokens         INTEGER NOT NULL,
    covered_tokens INTEGER NOT NULL,
    created_at     REAL NOT NULL,
    PRIMARY KEY (thread_id, upto_seq)
);
CREATE TABLE blobs (
    ref        TEXT PRIMARY KEY,
    size       INTEGER NOT NULL,
    chunk_size INTEGER NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE blob_chunks (
    id   INTEGER PRIMARY KEY,
    ref  TEXT NOT NULL,
    idx  INTEGER NOT NULL,
    data BLOB NOT NULL
);
CREATE UNIQUE INDEX blob_chunks_ref ON blob_chunks (ref, idx);
CREATE TABLE blob_refs (
    thread_id TEXT NOT NULL,
    ref       TEXT NOT NULL,
    PRIMARY KEY (thread_id, ref)
) WITHOUT ROWID;
CREATE INDEX blob_refs_ref ON blob_refs (ref);
""",
    ),
]

encode = msgspec.json.encode

LOAD_SLICE = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}
FROM threads t
LEFT JOIN inputs i ON i.thread_id = t.id AND i.not_before <= ?1
                  AND (t.awaiting = 0 OR i.kind = 'tool_result')
WHERE t.id = ?2
ORDER BY i.id LIMIT ?3
"""

# LOAD_SLICE for every thread of a claim batch at once (?2: a JSON array of thread ids),
# at most ?3 inputs per thread; rows come grouped by thread, inputs in admission order.
LOAD_SLICES = f"""
SELECT {", ".join("t." + c.strip() for c in THREAD_COLS.split(","))},
       {", ".join("i." + c.strip() for c in INPUT_COLS.split(","))}
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
CLAIM_THREADS = """
UPDATE threads SET lease_token = :token, lease_owner = :worker, lease_expires = :expires
WHERE id IN (
    SELECT id FROM threads
    WHERE ready_key IS NOT NULL AND ready_at <= :now AND lease_expires <= :now
    ORDER BY ready_key LIMIT :limit)
RETURNING id, agent
"""
CLAIM_OUTBOX = f"""
UPDATE outbox SET status = 'running', attempts = attempts + 1, lease_token = :token,
                  lease_owner = :worker, lease_expires = :expires
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND available_at <= :now
    ORDER BY available_at LIMIT :limit)
RETURNING {OUTBOX_COLS}
"""
# No RETURNING id: the store reads last_insert_rowid() instead. On this SQLite an
# INSERT ... RETURNING costs ~20 us more than the insert itself (measured), and the hot
# path admits two inputs per turn. The same holds, less so, for FINISH_SLICE below.
INSERT_INPUT = """
INSERT INTO inputs (thread_id, dedup_key, kind, priority, not_before, admitted_at, sort_key,
                    content, call_id, tool_name, is_error, source)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_MESSAGE = """
INSERT INTO messages (thread_id, seq, role, content, tool_calls, tool_call_id, name, source,
                      input_id, created_at, tokens)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_SUMMARY = """
INSERT INTO summaries (thread_id, upto_seq, made_at_seq, content, tokens, covered_tokens, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?)
"""
# The newest messages of a thread in (min_seq, max_seq], newest first: a view's read.
NEWEST_MESSAGES = f"""
SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ? AND seq <= ? AND seq > ?
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
                    created_at)
VALUES (?1, (SELECT agent FROM threads WHERE id = ?1), ?2, ?3, ?4, ?5, ?6, ?7)
"""
# Release a committed slice's lease and recompute readiness with the new awaiting count
# (:awaiting, not the column: SET expressions see the row's old values).
# A summary (:upto not NULL) must move forward and cover only stored messages.
FINISH_SLICE = """
UPDATE threads SET
  last_seq = coalesce(:last_seq, last_seq), awaiting = :awaiting, failures = 0, error = NULL,
  lease_token = NULL, lease_owner = NULL, lease_expires = 0, updated_at = :now,
  tokens = tokens + :tokens,
  summary_seq = coalesce(:upto, summary_seq),
  summarized_tokens = coalesce(:covered, summarized_tokens),
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


def translate(exc: BaseException) -> BaseException:
    """Turn an apsw error into the dormant error a caller should see."""
    if isinstance(exc, DormantError) or not isinstance(exc, apsw.Error):
        return exc
    if isinstance(exc, apsw.FullError):
        new: StoreError = StoreFull(f"the database or its disk is full: {exc}")
    elif isinstance(exc, apsw.BusyError | apsw.LockedError):
        new = StoreLocked(f"the database stayed locked past the busy timeout: {exc}")
    elif isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        new = SchemaError(f"the database file is damaged ({exc}); run `dormant doctor`")
    else:
        new = StoreError(f"SQLite error: {exc}")
    new.__cause__ = exc
    return new


def path_from_url(url: str) -> str:
    """The file of a SQLite URL: ``sqlite:///rel.db`` is relative, ``sqlite:////abs.db`` absolute."""
    if not url.startswith("sqlite:///"):
        raise UsageError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    path = url[len("sqlite:///") :]
    if not path or path.endswith("/"):
        raise UsageError(f"SQLite URL has no file path: {url!r}")
    return path


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
