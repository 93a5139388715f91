-- dormant SQLite schema. This file is the truth for a new database; migrations in
-- sqlite.py bring older databases to the same shape. Times are Unix seconds (REAL).

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
    updated_at    REAL NOT NULL
);
CREATE INDEX threads_ready ON threads (ready_key) WHERE ready_key IS NOT NULL;

CREATE TABLE inputs (
    id          INTEGER PRIMARY KEY,
    thread_id   TEXT NOT NULL REFERENCES threads(id),
    dedup_key   TEXT NOT NULL,
    kind        TEXT NOT NULL,
    priority    INTEGER NOT NULL,
    not_before  REAL NOT NULL,
    admitted_at REAL NOT NULL,
    sort_key    REAL NOT NULL,
    -- emptied once consumed: the message made from it holds the text
    content     TEXT NOT NULL,
    call_id     TEXT,
    tool_name   TEXT,
    is_error    INTEGER NOT NULL DEFAULT 0,
    source      TEXT,
    consumed_at REAL,
    UNIQUE (thread_id, dedup_key)
);
CREATE INDEX inputs_pending ON inputs (thread_id, id) WHERE consumed_at IS NULL;

CREATE TABLE messages (
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
    PRIMARY KEY (thread_id, seq)
) WITHOUT ROWID;

CREATE TABLE outbox (
    id            INTEGER PRIMARY KEY,
    thread_id     TEXT NOT NULL REFERENCES threads(id),
    agent         TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    tool          TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    idempotent    INTEGER NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'done', 'dead', 'unknown')),
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
