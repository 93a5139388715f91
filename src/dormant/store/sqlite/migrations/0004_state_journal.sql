-- schema 3 -> 4: the state journal and its checkpoints (issue 17 item 3).
ALTER TABLE threads ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;
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
