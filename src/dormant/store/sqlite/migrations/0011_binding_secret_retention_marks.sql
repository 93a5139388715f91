-- schema 10 -> 11: binding keys become keyed hashes, and pruned history is visible.
-- The binding secret binding keys are made under (HMAC-SHA256), 32 random bytes made
-- with the store (SQLite's randomness is seeded by the operating system). A store that
-- already holds memories or subjects is marked: its keys are of the previous scheme
-- (b1_, sha256 of the parts) and are moved to their new key when their identity is next
-- bound. retention_marks: per thread, the messages a retention policy deleted (how
-- many, up to which seq, under which policy), shown where history is read.
INSERT OR IGNORE INTO memory_meta VALUES ('binding_secret', lower(hex(randomblob(32))));
INSERT OR IGNORE INTO memory_meta SELECT 'binding_legacy', '1'
WHERE EXISTS (SELECT 1 FROM memory_records) OR EXISTS (SELECT 1 FROM memory_identity)
   OR EXISTS (SELECT 1 FROM memory_moves) OR EXISTS (SELECT 1 FROM memory_links)
   OR EXISTS (SELECT 1 FROM threads WHERE subject IS NOT NULL)
   OR EXISTS (SELECT 1 FROM inputs WHERE source LIKE 'b1\_%' ESCAPE '\');
CREATE TABLE retention_marks (
    thread_id TEXT PRIMARY KEY,
    pruned    INTEGER NOT NULL,
    up_to_seq INTEGER NOT NULL,
    policy    TEXT NOT NULL,
    pruned_at REAL NOT NULL
) WITHOUT ROWID;
