"""Every statement of the PostgreSQL store's memory rows, and the row conversions.

The tables are the store's (``schema.sql``, ``migrations/0007_memory_records.sql``);
the vector column and its HNSW index are added when the first embedder claims the
memory (its dimension is known then), only where the ``vector`` extension exists.
Extension objects (the ``vector`` type, the ``<=>`` operator) are found through the
extension's own schema, which each memory transaction appends to its search path
(:data:`SEARCH_PATH`): the tables stay in the store's schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ....memory.ranking import FilterSpec
from ....memory.records import MemoryRecord
from ...rows import row_memory

COLS = (
    "rid, id, tenant, subject, kind, text, tags, agent, thread, importance, source_thread, source_seq, "
    "created_at, valid_from, invalid_at, last_access_at, access_count, content_hash"
)
_INSERT_COLS = COLS.removeprefix("rid, ")

# -- set-up ---------------------------------------------------------------------------------

#: the schema the vector extension lives in (no row: not installed)
VECTOR_SCHEMA = (
    "SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace "
    "WHERE e.extname = 'vector'"
)
#: in public, never in the store's schema (the schema must stay dumpable and droppable alone)
CREATE_VECTOR = "CREATE EXTENSION IF NOT EXISTS vector SCHEMA public"
#: appends the extension's schema (%s) to this transaction's search path
SEARCH_PATH = (
    "SELECT set_config('search_path', current_setting('search_path') || ', ' || quote_ident(%s), true)"
)
#: HNSW scans that keep going until enough rows pass the scope filter
ITERATIVE_SCAN = "SET LOCAL hnsw.iterative_scan = relaxed_order"
#: serializes the claim of the embedder and the vector column's creation
META_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dormant_memory_meta'))"
META_GET = "SELECT value FROM memory_meta WHERE name = %s"
META_PUT = "INSERT INTO memory_meta VALUES (%s, %s) ON CONFLICT (name) DO NOTHING"
ADD_VECTOR_COLUMN = "ALTER TABLE memory_records ADD COLUMN IF NOT EXISTS embedding vector({dim})"
ADD_VECTOR_INDEX = (
    "CREATE INDEX IF NOT EXISTS memory_records_vec ON memory_records USING hnsw (embedding vector_cosine_ops)"
)

# -- writes ---------------------------------------------------------------------------------

#: one subject's adds and rebinds are serialized (dedup and supersession read, then write)
SUBJECT_LOCK = "SELECT pg_advisory_xact_lock(hashtext(%s))"
MOVED_TO = "SELECT new_key FROM memory_moves WHERE tenant = %s AND old_key = %s"
HISTORY = (
    "INSERT INTO memory_history (tenant, op, subject, record_id, actor, at, detail) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s)"
)
DUPLICATE = (
    f"SELECT {COLS} FROM memory_records WHERE tenant = %s AND subject = %s AND content_hash = %s "
    "AND invalid_at IS NULL"
)
MERGE_IMPORTANCE = (
    "UPDATE memory_records SET importance = greatest(importance, %s), "
    "created_at = greatest(created_at, %s) WHERE rid = %s"
)
SAME_KEY = (
    f"SELECT {COLS} FROM memory_records WHERE tenant = %s AND subject = %s AND kind = %s "
    "AND key_tag = %s AND (invalid_at IS NULL OR invalid_at > %s)"
)
NAMED = (
    f"SELECT {COLS} FROM memory_records WHERE tenant = %s AND subject = %s AND invalid_at IS NULL "
    "AND id = ANY(%s)"
)
INVALIDATE = (
    "UPDATE memory_records SET invalid_at = greatest(valid_from, %s) "
    "WHERE tenant = %s AND id = %s AND (invalid_at IS NULL OR invalid_at > %s)"
)
_INSERT = (
    f"INSERT INTO memory_records (key_tag, {_INSERT_COLS}, fts{{vec_col}}) VALUES "
    f"({', '.join(['%s'] * 18)}, to_tsvector('english', %s){{vec_val}})"
)
INSERT = _INSERT.format(vec_col="", vec_val="")
INSERT_WITH_VECTOR = _INSERT.format(vec_col=", embedding", vec_val=", %s::vector")
TOUCH = (
    "UPDATE memory_records SET access_count = access_count + 1, "
    "last_access_at = greatest(coalesce(last_access_at, 0), %s) WHERE tenant = %s AND id = %s"
)
FORGET = (
    "UPDATE memory_records SET invalid_at = greatest(valid_from, %s) "
    "WHERE tenant = %s AND id = %s AND subject = ANY(%s) AND invalid_at IS NULL RETURNING subject"
)
LINK = "INSERT INTO memory_links VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
UNLINK = "DELETE FROM memory_links WHERE tenant = %s AND key = %s AND other = %s"
MOVE_DUPLICATES = (
    "SELECT a.id, b.id FROM memory_records a JOIN memory_records b ON b.tenant = a.tenant "
    "AND b.subject = %s AND b.content_hash = a.content_hash AND b.invalid_at IS NULL "
    "WHERE a.tenant = %s AND a.subject = %s AND a.invalid_at IS NULL"
)
MOVE_RECORDS = "UPDATE memory_records SET subject = %s WHERE tenant = %s AND subject = %s RETURNING id"
MOVE_CHAINS = "UPDATE memory_moves SET new_key = %s WHERE tenant = %s AND new_key = %s"
MOVE = (
    "INSERT INTO memory_moves VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, old_key) "
    "DO UPDATE SET new_key = EXCLUDED.new_key, moved_at = EXCLUDED.moved_at"
)
MOVE_IDENTITY = (
    "UPDATE memory_identity SET key = %s WHERE tenant = %s AND key = %s AND NOT EXISTS ("
    "SELECT 1 FROM memory_identity i WHERE i.tenant = memory_identity.tenant AND i.part = "
    "memory_identity.part AND i.part_hash = memory_identity.part_hash AND i.key = %s)"
)
REGISTER_IDENTITY = "INSERT INTO memory_identity VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING"
CLEAR_DICTIONARY = "DELETE FROM memory_dictionary WHERE tenant = %s"
DICTIONARY_TERM = "INSERT INTO memory_dictionary VALUES (%s, %s, %s, %s)"

# -- reads ----------------------------------------------------------------------------------

DICTIONARY = "SELECT grp, term FROM memory_dictionary WHERE tenant = %s ORDER BY grp, pos"
KEYS_FOR_PART = (
    "SELECT key FROM memory_identity WHERE tenant = %s AND part = %s AND part_hash = %s AND key > %s "
    "ORDER BY key LIMIT %s"
)
LINKED = "SELECT other FROM memory_links WHERE tenant = %s AND key = ANY(%s) ORDER BY other LIMIT %s"
#: the text search; {q} is the OR of one phraseto_tsquery per term, {scope} the filter
TEXT_SEARCH = (
    f"SELECT {COLS}, ts_rank_cd(fts, q) AS s FROM memory_records, (SELECT {{q}} AS q) qq "
    "WHERE fts @@ q AND {scope} ORDER BY s DESC, rid LIMIT %s"
)
TEXT_TERM = "phraseto_tsquery('english', %s)"
VECTOR_SEARCH = (
    f"SELECT {COLS}, embedding <=> %s::vector AS d FROM memory_records "
    "WHERE embedding IS NOT NULL AND {scope} ORDER BY d LIMIT %s"
)
RECENT = f"SELECT {COLS} FROM memory_records WHERE {{scope}} ORDER BY created_at DESC LIMIT %s"
SCOPE = "tenant = %s AND subject = ANY(%s) AND "
GET = f"SELECT {COLS}{{vec}} FROM memory_records WHERE tenant = %s AND subject = ANY(%s) AND id = ANY(%s)"
LIST = (
    f"SELECT {COLS} FROM memory_records WHERE tenant = %s AND subject = ANY(%s) AND {{where}} "
    "AND rid < %s ORDER BY rid DESC LIMIT %s"
)
_HCOLS = "h.seq, h.tenant, h.op, h.subject, h.record_id, h.actor, h.at, h.detail"
HISTORY_OF_RECORD = (
    f"SELECT {_HCOLS} FROM memory_history h WHERE h.record_id = %s AND h.tenant = %s AND h.seq > %s "
    "AND EXISTS (SELECT 1 FROM memory_records r WHERE r.id = h.record_id AND r.tenant = h.tenant "
    "AND r.subject = ANY(%s)) ORDER BY h.seq LIMIT %s"
)
HISTORY_OF_SUBJECTS = (
    f"SELECT {_HCOLS} FROM memory_history h WHERE h.tenant = %s AND h.subject = ANY(%s) AND h.seq > %s "
    "ORDER BY h.seq LIMIT %s"
)


def vector_literal(v: Sequence[float]) -> str:
    """A vector as pgvector's text input."""
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def parse_vector(text: str) -> tuple[float, ...]:
    """pgvector's text output as a vector."""
    return tuple(float(x) for x in text.strip("[]").split(","))


def filter_sql(spec: FilterSpec, now: float) -> tuple[str, list[Any]]:
    """The structural filter (kinds, typed tags, validity at a time) as SQL and its arguments."""
    sql: list[str] = []
    args: list[Any] = []
    if spec.kinds:
        sql.append("kind = ANY(%s)")
        args.append(sorted(spec.kinds))
    for key, value in sorted(spec.tags.items()):
        sql.append("tags -> %s = %s::jsonb")
        args.extend([key, msgspec.json.encode(value).decode()])
    if not spec.history:
        at = spec.at if spec.at is not None else now
        sql.append("valid_from <= %s AND (invalid_at IS NULL OR invalid_at > %s)")
        args.extend([at, at])
    return (" AND ".join(sql) or "TRUE"), args


def to_record(row: Sequence[Any]) -> MemoryRecord:
    """A ``COLS`` row as a record."""
    return row_memory(row, dict(row[6]))


# keyed binding keys: the secret, and moving a key of the previous scheme (b1_) to its new one
BINDING_META = "SELECT name, value FROM memory_meta WHERE name IN ('binding_secret', 'binding_legacy')"
DROP_IDENTITY = (
    "DELETE FROM memory_identity WHERE tenant = %s AND part = %s AND part_hash = %s AND key IN (%s, %s)"
)
MOVED_FROM = "SELECT 1 FROM memory_moves WHERE tenant = %s AND old_key = %s"
KEY_KNOWN = (
    "SELECT EXISTS (SELECT 1 FROM memory_records WHERE tenant = %(tenant)s AND subject = %(key)s) "
    "OR EXISTS (SELECT 1 FROM memory_links WHERE tenant = %(tenant)s AND key = %(key)s) "
    "OR EXISTS (SELECT 1 FROM memory_history WHERE tenant = %(tenant)s AND subject = %(key)s) "
    "OR EXISTS (SELECT 1 FROM threads WHERE tenant = %(tenant)s AND subject = %(key)s)"
)
MOVE_LINKS = """
WITH gone AS (
  DELETE FROM memory_links WHERE tenant = %(tenant)s AND (key = %(old)s OR other = %(old)s)
  RETURNING key, other, created_at)
INSERT INTO memory_links
SELECT %(tenant)s, CASE WHEN key = %(old)s THEN %(new)s ELSE key END,
       CASE WHEN other = %(old)s THEN %(new)s ELSE other END, min(created_at)
FROM gone WHERE NOT (key = %(old)s AND other = %(new)s) AND NOT (key = %(new)s AND other = %(old)s)
GROUP BY 2, 3
ON CONFLICT DO NOTHING
"""
JOURNAL_SUBJECT = """
INSERT INTO state_journal (thread_id, seq, kind, key, value, run, created_at, msg_seq)
SELECT t.id, coalesce((SELECT max(j.seq) FROM state_journal j WHERE j.thread_id = t.id), 0) + 1,
       'update', '_subject', %(value)s, t.runs, %(now)s, t.last_seq
FROM threads t WHERE t.tenant = %(tenant)s AND t.subject = %(old)s
"""
THREAD_SUBJECT = """
UPDATE threads SET subject = %(new)s,
  state = CASE WHEN state IS NULL THEN NULL
               ELSE jsonb_set(state::jsonb, '{_subject}', to_jsonb(%(value)s::text))::text END
WHERE tenant = %(tenant)s AND subject = %(old)s
"""
MOVE_HISTORY = "UPDATE memory_history SET subject = %s WHERE tenant = %s AND subject = %s"
