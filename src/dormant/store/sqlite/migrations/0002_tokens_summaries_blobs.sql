-- schema 1 -> 2: token counts, compaction summaries, blobs (issue 4).
-- Messages written before keep tokens NULL: views estimate them from their length.
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
