-- Long-term memory, PostgreSQL. Records are never deleted: supersession and forget set invalid_at.
-- The vector column is added when the first embedder claims the memory (its dimension is known then).
CREATE TABLE IF NOT EXISTS memory_records (
    rid            BIGSERIAL PRIMARY KEY,
    id             TEXT NOT NULL UNIQUE,
    tenant         TEXT NOT NULL,
    subject        TEXT NOT NULL,
    kind           TEXT NOT NULL,
    text           TEXT NOT NULL,
    tags           JSONB NOT NULL DEFAULT '{}',
    key_tag        TEXT,
    agent          TEXT,
    thread         TEXT,
    importance     DOUBLE PRECISION NOT NULL,
    source_thread  TEXT,
    source_seq     BIGINT,
    created_at     DOUBLE PRECISION NOT NULL,
    valid_from     DOUBLE PRECISION NOT NULL,
    invalid_at     DOUBLE PRECISION,
    last_access_at DOUBLE PRECISION,
    access_count   BIGINT NOT NULL DEFAULT 0,
    content_hash   TEXT NOT NULL,
    fts            TSVECTOR NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_records_scope ON memory_records (tenant, subject, created_at);
CREATE INDEX IF NOT EXISTS memory_records_key
    ON memory_records (tenant, subject, kind, key_tag) WHERE invalid_at IS NULL AND key_tag IS NOT NULL;
CREATE UNIQUE INDEX IF NOT EXISTS memory_records_hash
    ON memory_records (tenant, subject, content_hash) WHERE invalid_at IS NULL;
CREATE INDEX IF NOT EXISTS memory_records_fts ON memory_records USING gin (fts);

CREATE TABLE IF NOT EXISTS memory_history (
    seq       BIGSERIAL PRIMARY KEY,
    tenant    TEXT NOT NULL,
    op        TEXT NOT NULL,
    subject   TEXT NOT NULL,
    record_id TEXT,
    actor     TEXT NOT NULL,
    at        DOUBLE PRECISION NOT NULL,
    detail    TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS memory_history_subject ON memory_history (tenant, subject, seq);
CREATE INDEX IF NOT EXISTS memory_history_record ON memory_history (record_id, seq);

CREATE TABLE IF NOT EXISTS memory_links (
    tenant TEXT NOT NULL, key TEXT NOT NULL, other TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, key, other)
);
CREATE TABLE IF NOT EXISTS memory_moves (
    tenant TEXT NOT NULL, old_key TEXT NOT NULL, new_key TEXT NOT NULL, moved_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (tenant, old_key)
);
CREATE TABLE IF NOT EXISTS memory_identity (
    tenant TEXT NOT NULL, part TEXT NOT NULL, part_hash TEXT NOT NULL, key TEXT NOT NULL,
    PRIMARY KEY (tenant, part, part_hash, key)
);
CREATE TABLE IF NOT EXISTS memory_dictionary (
    tenant TEXT NOT NULL, grp INTEGER NOT NULL, pos INTEGER NOT NULL, term TEXT NOT NULL,
    PRIMARY KEY (tenant, grp, pos)
);
CREATE TABLE IF NOT EXISTS memory_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
