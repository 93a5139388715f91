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
    runs              INTEGER NOT NULL DEFAULT 0,
    -- tokens the model server counted for the thread's committed slices
    usage_prompt      INTEGER NOT NULL DEFAULT 0,
    usage_completion  INTEGER NOT NULL DEFAULT 0,
    usage_cached      INTEGER NOT NULL DEFAULT 0,
    -- why (and until when) the thread waits on its model endpoint, uncounted as a failure
    wait_reason       TEXT,
    wait_until        REAL NOT NULL DEFAULT 0,
    -- the thread's state journal replayed, as JSON (key -> JSON value), written by the
    -- commit that journals changes; NULL: not carried (over 64 KiB, or written before
    -- schema 9): replay the journal. Its subject (a binding key), for a subject's threads.
    state             TEXT DEFAULT '{}',
    subject           TEXT,
    -- the tools the thread's client runs itself (JSON function schemas), shown to the model;
    -- set by the newest admitted input that carried some (NULL: none)
    client_tools      TEXT,
    -- the thread's number, which its messages are stored under (message_rows); given by
    -- INSERT_THREAD, never changed (not the rowid: VACUUM may renumber that)
    rid               INTEGER
);
CREATE UNIQUE INDEX threads_rid ON threads (rid);
-- the claim walks the tenants with ready work, each one's threads by ready_key, and counts
-- each tenant's live leases (see CLAIM_THREADS)
CREATE INDEX threads_ready ON threads (tenant, ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX threads_leased ON threads (tenant, lease_expires) WHERE lease_token IS NOT NULL;
CREATE INDEX threads_tenant ON threads (tenant) WHERE tenant <> '';
CREATE INDEX threads_waiting ON threads (wait_reason) WHERE wait_reason IS NOT NULL;
CREATE INDEX threads_subject ON threads (subject, tenant) WHERE subject IS NOT NULL;
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
    source      TEXT,
    parts       TEXT  -- images and files: JSON references to blobs and their facts
);
CREATE INDEX inputs_thread ON inputs (thread_id, id);

-- Every dedup key admitted within the dedup horizon (retention prunes older ones whose
-- input was consumed, walking this primary key a window at a time: an index on
-- admitted_at took as many bytes per key as the key): a repeated (thread, key) is a
-- duplicate, and one whose request fingerprint differs from the stored one is refused
-- (idempotency_mismatch).
CREATE TABLE input_keys (
    thread_id   TEXT NOT NULL,
    dedup_key   TEXT NOT NULL,
    input_id    INTEGER NOT NULL,
    admitted_at REAL NOT NULL DEFAULT 0,
    -- a hash of the request that admitted it (an Idempotency-Key's body), or NULL
    fingerprint TEXT,
    PRIMARY KEY (thread_id, dedup_key)
) WITHOUT ROWID;

-- A rowid table: rows are appended in commit order, so pages stay full although
-- threads interleave; the (thread_rid, seq) index serves views and paging. Rows are
-- keyed by the thread's number, not its id (a few bytes, not the id's length, in each
-- row and index entry). Reads go through the messages view; writes, and the per-slice
-- read and history pages (sql.py: the view's join costs more), name message_rows.
CREATE TABLE message_rows (
    id           INTEGER PRIMARY KEY,
    thread_rid   INTEGER NOT NULL REFERENCES threads(rid),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    tool_calls   TEXT,
    tool_call_id TEXT,
    name         TEXT,
    source       TEXT,
    input_id     INTEGER,
    created_at   REAL NOT NULL,
    tokens       INTEGER, -- counted when written; NULL on rows written before schema 2
    -- an assistant message: the server's finish_reason ('length': cut by the output cap),
    -- the model's reasoning (apart from the answer), the tokens the server counted
    finish_reason    TEXT,
    reasoning        TEXT,
    usage_prompt     INTEGER,
    usage_completion INTEGER,
    usage_cached     INTEGER,
    parts            TEXT  -- images and files: JSON references to blobs and their facts
);
CREATE UNIQUE INDEX message_rows_thread_seq ON message_rows (thread_rid, seq);
-- the messages with their thread's id: what every read names
CREATE VIEW messages AS
SELECT m.id, t.id AS thread_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.name,
       m.source, m.input_id, m.created_at, m.tokens, m.finish_reason, m.reasoning,
       m.usage_prompt, m.usage_completion, m.usage_cached, m.parts
FROM message_rows m JOIN threads t ON t.rid = m.thread_rid;

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
    -- external: a call to a client's tool, never claimed; its answer comes from outside
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'dead', 'unknown', 'external')),
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

-- long-term memory (issue 15; migrations/0005_memory_records.sql)
CREATE TABLE memory_records (
    rid            INTEGER PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    tenant         TEXT NOT NULL,
    subject        TEXT NOT NULL,
    kind           TEXT NOT NULL,
    text           TEXT NOT NULL,
    tags           TEXT NOT NULL DEFAULT '{}',
    key_tag        TEXT,
    agent          TEXT,
    thread         TEXT,
    importance     REAL NOT NULL,
    source_thread  TEXT,
    source_seq     INTEGER,
    created_at     REAL NOT NULL,
    valid_from     REAL NOT NULL,
    invalid_at     REAL,
    last_access_at REAL,
    access_count   INTEGER NOT NULL DEFAULT 0,
    content_hash   TEXT NOT NULL
);
CREATE INDEX memory_records_scope
    ON memory_records (tenant, subject, created_at);
CREATE INDEX memory_records_key
    ON memory_records (tenant, subject, kind, key_tag) WHERE invalid_at IS NULL AND key_tag IS NOT NULL;
-- exact duplicates among the valid records of a subject are merged, not stored twice
CREATE UNIQUE INDEX memory_records_hash
    ON memory_records (tenant, subject, content_hash) WHERE invalid_at IS NULL;

CREATE TABLE memory_history (
    seq       INTEGER PRIMARY KEY,
    tenant    TEXT NOT NULL,
    op        TEXT NOT NULL,
    subject   TEXT NOT NULL,
    record_id TEXT,
    actor     TEXT NOT NULL,
    at        REAL NOT NULL,
    detail    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX memory_history_subject ON memory_history (tenant, subject, seq);
CREATE INDEX memory_history_record ON memory_history (record_id, seq);

-- explicit links between binding keys (stored in both directions); only these widen a scope
CREATE TABLE memory_links (
    tenant     TEXT NOT NULL,
    key        TEXT NOT NULL,
    other      TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (tenant, key, other)
) WITHOUT ROWID;

-- a moved subject: writes to the old key land on the new one
CREATE TABLE memory_moves (
    tenant   TEXT NOT NULL,
    old_key  TEXT NOT NULL,
    new_key  TEXT NOT NULL,
    moved_at REAL NOT NULL,
    PRIMARY KEY (tenant, old_key)
) WITHOUT ROWID;

-- partial identity → binding keys (a phone's own hash → every key bound with that phone)
CREATE TABLE memory_identity (
    tenant    TEXT NOT NULL,
    part      TEXT NOT NULL,
    part_hash TEXT NOT NULL,
    key       TEXT NOT NULL,
    PRIMARY KEY (tenant, part, part_hash, key)
) WITHOUT ROWID;

CREATE TABLE memory_dictionary (
    tenant  TEXT NOT NULL,
    grp     INTEGER NOT NULL,
    pos     INTEGER NOT NULL,
    term    TEXT NOT NULL,
    PRIMARY KEY (tenant, grp, pos)
) WITHOUT ROWID;

CREATE TABLE memory_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
-- the binding secret binding keys are made under (HMAC-SHA256): 32 random bytes, made
-- with the store (SQLite's randomness is seeded by the operating system)
INSERT INTO memory_meta VALUES ('binding_secret', lower(hex(randomblob(32))));

-- full text: scope (the binding key, as a phrase) and body (CJK pre-split), rowid = memory_records.rid
CREATE VIRTUAL TABLE memory_fts USING fts5(
    scope, body, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
);

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
    -- the thread's last message seq when written (fork and rewind branch there)
    msg_seq     INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX state_journal_checkpoints ON state_journal (thread_id, kind, seq)
    WHERE kind IN ('full', 'incremental');
CREATE INDEX state_journal_keys ON state_journal (thread_id, key, seq) WHERE key IS NOT NULL;
CREATE TABLE state_parts (
    thread_id TEXT NOT NULL,
    seq       INTEGER NOT NULL,
    idx       INTEGER NOT NULL,
    data      TEXT NOT NULL,
    PRIMARY KEY (thread_id, seq, idx)
) WITHOUT ROWID;

-- per thread, the messages a retention policy deleted: how many, up to which seq, under
-- which policy (shown where history is read: `dormant show`, /messages, export)
CREATE TABLE retention_marks (
    thread_id TEXT PRIMARY KEY,
    pruned    INTEGER NOT NULL,
    up_to_seq INTEGER NOT NULL,
    policy    TEXT NOT NULL,
    pruned_at REAL NOT NULL
) WITHOUT ROWID;

-- waits for a person: a call that needs approval, or a question (ask_user), committed
-- by its slice instead of an outbox entry; the whole history stays (a decision updates
-- its row). The thread counts it in `awaiting`: an approval puts the call in the outbox,
-- a denial, an expiry or an answer admits its tool result, in the decision's transaction.
CREATE TABLE approvals (
    id                INTEGER PRIMARY KEY,
    thread_id         TEXT NOT NULL REFERENCES threads(id),
    tenant            TEXT NOT NULL,
    call_id           TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('approval', 'question')),
    tool              TEXT NOT NULL,
    arguments         TEXT NOT NULL,
    idempotent        INTEGER NOT NULL DEFAULT 0,
    role              TEXT,
    deadline          REAL NOT NULL DEFAULT 0,
    escalate_role     TEXT,
    escalate_s        REAL NOT NULL DEFAULT 0,
    status            TEXT NOT NULL DEFAULT 'requested'
                      CHECK (status IN ('requested', 'escalated', 'approved', 'edited', 'denied',
                                        'expired', 'answered')),
    decision_key      TEXT,
    decided_by        TEXT,
    note              TEXT,
    decided_arguments TEXT,
    requested_at      REAL NOT NULL,
    decided_at        REAL,
    UNIQUE (thread_id, call_id)
);
CREATE INDEX approvals_open ON approvals (tenant, id) WHERE status IN ('requested', 'escalated');
CREATE INDEX approvals_due ON approvals (deadline)
    WHERE status IN ('requested', 'escalated') AND deadline > 0;
