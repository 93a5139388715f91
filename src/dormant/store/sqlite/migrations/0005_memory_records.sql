-- schema 4 -> 5: long-term memory (issue 15). Records are never deleted: supersession and forget set invalid_at.
-- The vector table (sqlite-vec vec0) is created on first use, when the embedder's dimension is known.
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

-- full text: scope (the binding key, as a phrase) and body (CJK pre-split), rowid = memory_records.rid
CREATE VIRTUAL TABLE memory_fts USING fts5(
    scope, body, content='', contentless_delete=1, tokenize='porter unicode61 remove_diacritics 2'
);
