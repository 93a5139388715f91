-- dormant SQLite schema. This file is the truth for a new database; the numbered files in
-- migrations/ bring older databases to the same shape. Times are Unix seconds (REAL).

CREATE TABLE schema_version (
    version INTEGER NOT NULL
);

CREATE TABLE threads (
    id            TEXT PRIMARY KEY,
    agent         TEXT NOT NULL,
    parent_id     TEXT REFERENCES threads(id),
    parent_seq    INTEGER NOT NULL DEFAULT 0,
    status        TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failed')),
    last_seq      INTEGER NOT NULL DEFAULT 0,
    awaiting      INTEGER NOT NULL DEFAULT 0,
    failures      INTEGER NOT NULL DEFAULT 0,
    error         TEXT,
    -- scheduling: smallest sort_key / not_before among consumable pending inputs
    ready_key     REAL,
    ready_at      REAL,
    lease_token   TEXT,
    lease_owner   TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    -- prompt tokens of the thread's own messages, and of those its latest summary covers
    tokens            INTEGER NOT NULL DEFAULT 0,
    summarized_tokens INTEGER NOT NULL DEFAULT 0,
    summary_seq       INTEGER NOT NULL DEFAULT 0,
    -- the tenant of `dormant serve` owning the thread ('' for the library's default tenant):
    -- a tenant's thread ids start with its id (t + 12 hex digits) and '/', so children,
    -- whose ids extend their parent's, inherit it
    tenant            TEXT GENERATED ALWAYS AS (CASE WHEN substr(id, 14, 1) = '/' AND substr(id, 1, 1) = 't' THEN substr(id, 1, 13) ELSE '' END) VIRTUAL,
    -- runs ended (agent-declared units; by default one per user turn): checkpoint cadence
    runs              INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX threads_ready ON threads (ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX threads_tenant ON threads (tenant) WHERE tenant <> '';
-- Children of a thread (deleting a thread takes its descendants).
CREATE INDEX threads_parent ON threads (parent_id) WHERE parent_id IS NOT NULL;

-- Pending inputs only: the slice that consumes an input deletes it in its
-- transaction (the message made from it keeps its id). AUTOINCREMENT: ids are
-- never reused, even when the table empties.
CREATE TABLE inputs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    dedup_key   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    not_before  REAL NOT NULL,
    admitted_at REAL NOT NULL,
    sort_key    REAL NOT NULL,
    content     TEXT NOT NULL,
    call_id     TEXT,
    tool_name   TEXT,
    is_error    INTEGER NOT NULL DEFAULT 0,
    source      TEXT
);
CREATE INDEX inputs_thread ON inputs (thread_id, id);

-- Every dedup key ever admitted, for ever: a repeated (thread, key) is a duplicate.
CREATE TABLE input_keys (
    thread_id TEXT NOT NULL,
    dedup_key TEXT NOT NULL,
    input_id  INTEGER NOT NULL,
    PRIMARY KEY (thread_id, dedup_key)
) WITHOUT ROWID;

-- A rowid table: rows are appended in commit order, so pages stay full although
-- threads interleave; the (thread_id, seq) index serves views and paging.
CREATE TABLE messages (
    id           INTEGER PRIMARY KEY,
    thread_id    TEXT NOT NULL REFERENCES threads(id),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    tool_calls   TEXT,
    tool_call_id TEXT,
    name         TEXT,
    source       TEXT,
    input_id     INTEGER,
    created_at   REAL NOT NULL,
    tokens       INTEGER  -- counted when written; NULL on rows written before schema 2
);
CREATE UNIQUE INDEX messages_thread_seq ON messages (thread_id, seq);

-- Compaction summaries: the originals stay in messages. made_at_seq is the thread's
-- last_seq when the summary was written (a child spawned before it never sees it).
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

-- Large tool outputs, stored once by content (ref = 'sha256:<hex>'), in chunks.
-- A blob being written lives under a 'tmp:' ref until its hash is known.
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
-- Which threads refer to which blobs: a blob no thread refers to is garbage.
CREATE TABLE blob_refs (
    thread_id TEXT NOT NULL,
    ref       TEXT NOT NULL,
    PRIMARY KEY (thread_id, ref)
) WITHOUT ROWID;
CREATE INDEX blob_refs_ref ON blob_refs (ref);

-- Open async tool calls. A call that completes is deleted in the transaction that
-- admits its result (the call and the result live on in messages); dead-lettered
-- and unknown calls stay for inspection.
CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY,
    thread_id     TEXT NOT NULL REFERENCES threads(id),
    agent         TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    tool          TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    idempotent    INTEGER NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'dead', 'unknown')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    available_at  REAL NOT NULL,
    lease_token   TEXT,
    lease_owner   TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    last_error    TEXT,
    created_at    REAL NOT NULL,
    finished_at   REAL,
    UNIQUE (thread_id, call_id)
);
CREATE INDEX outbox_pending ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_running ON outbox (lease_expires) WHERE status = 'running';

-- Tenants of `dormant serve` and their API keys. A key keeps only a random salt and
-- sha256(salt || secret); its secret is shown once.
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    salt       BLOB NOT NULL,
    digest     BLOB NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);

-- The state journal: per thread, change records (add/update/delete of a key, value
-- as JSON text) written in the slice's transaction, and checkpoint headers (full or
-- incremental) whose body lives in state_parts. A checkpoint counts for recovery only
-- once recoverable = 1, set after its parts were written and verified.
CREATE TABLE state_journal (
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('add', 'update', 'delete', 'full', 'incremental')),
    key         TEXT,
    value       TEXT,
    run         INTEGER NOT NULL DEFAULT 0,
    upto        INTEGER NOT NULL DEFAULT 0,
    parts       INTEGER NOT NULL DEFAULT 0,
    size        INTEGER NOT NULL DEFAULT 0,
    digest      TEXT,
    recoverable INTEGER NOT NULL DEFAULT 0,
    created_at  REAL NOT NULL,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX state_journal_checkpoints ON state_journal (thread_id, kind, seq)
    WHERE kind IN ('full', 'incremental');
CREATE TABLE state_parts (
    thread_id TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq, idx)
) WITHOUT ROWID;
