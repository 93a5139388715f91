-- schema 6 -> 7: long-term memory (issue 15). Records are never deleted: supersession and
-- forget set invalid_at. The vector column (pgvector) and its HNSW index are added when the
-- first embedder claims the memory, only where the extension exists (see store/postgres/memory.py).
CREATE TABLE memory_records (
    rid            bigserial PRIMARY KEY,
    id             text COLLATE "C" NOT NULL UNIQUE,
    tenant         text COLLATE "C" NOT NULL,
    subject        text COLLATE "C" NOT NULL,
    kind           text NOT NULL,
    text           text NOT NULL,
    tags           jsonb NOT NULL DEFAULT '{}',
    key_tag        text,
    agent          text,
    thread         text,
    importance     double precision NOT NULL,
    source_thread  text,
    source_seq     bigint,
    created_at     double precision NOT NULL,
    valid_from     double precision NOT NULL,
    invalid_at     double precision,
    last_access_at double precision,
    access_count   bigint NOT NULL DEFAULT 0,
    content_hash   text NOT NULL,
    fts            tsvector NOT NULL
);
CREATE INDEX memory_records_scope ON memory_records (tenant, subject, created_at);
CREATE INDEX memory_records_key
    ON memory_records (tenant, subject, kind, key_tag) WHERE invalid_at IS NULL AND key_tag IS NOT NULL;
-- exact duplicates among the valid records of a subject are merged, not stored twice
CREATE UNIQUE INDEX memory_records_hash
    ON memory_records (tenant, subject, content_hash) WHERE invalid_at IS NULL;
CREATE INDEX memory_records_fts ON memory_records USING gin (fts);

CREATE TABLE memory_history (
    seq       bigserial PRIMARY KEY,
    tenant    text COLLATE "C" NOT NULL,
    op        text NOT NULL,
    subject   text COLLATE "C" NOT NULL,
    record_id text COLLATE "C",
    actor     text NOT NULL,
    at        double precision NOT NULL,
    detail    text NOT NULL DEFAULT ''
);
CREATE INDEX memory_history_subject ON memory_history (tenant, subject, seq);
CREATE INDEX memory_history_record ON memory_history (record_id, seq);

-- explicit links between binding keys (stored in both directions); only these widen a scope
CREATE TABLE memory_links (
    tenant     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    other      text COLLATE "C" NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, key, other)
);
-- a moved subject: writes to the old key land on the new one
CREATE TABLE memory_moves (
    tenant   text COLLATE "C" NOT NULL,
    old_key  text COLLATE "C" NOT NULL,
    new_key  text COLLATE "C" NOT NULL,
    moved_at double precision NOT NULL,
    PRIMARY KEY (tenant, old_key)
);
-- partial identity -> binding keys (a phone's own hash -> every key bound with that phone)
CREATE TABLE memory_identity (
    tenant    text COLLATE "C" NOT NULL,
    part      text COLLATE "C" NOT NULL,
    part_hash text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, part, part_hash, key)
);
CREATE TABLE memory_dictionary (
    tenant text COLLATE "C" NOT NULL,
    grp    integer NOT NULL,
    pos    integer NOT NULL,
    term   text NOT NULL,
    PRIMARY KEY (tenant, grp, pos)
);
CREATE TABLE memory_meta (
    name  text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
