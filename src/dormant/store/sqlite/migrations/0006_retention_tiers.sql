-- schema 5 -> 6: retention tiers (issue 17 item 2). A dedup key remembers when its input
-- was admitted, so keys past the dedup horizon can be pruned (keys from before this
-- migration count as admitted now: they are kept a whole horizon more); a journal entry
-- remembers the thread's message seq it went with (fork and rewind branch there); the
-- newest change of a key is found by index.
ALTER TABLE input_keys ADD COLUMN admitted_at REAL NOT NULL DEFAULT 0;
UPDATE input_keys SET admitted_at = (julianday('now') - 2440587.5) * 86400.0;
CREATE INDEX input_keys_admitted ON input_keys (admitted_at);
ALTER TABLE state_journal ADD COLUMN msg_seq INTEGER NOT NULL DEFAULT 0;
CREATE INDEX state_journal_keys ON state_journal (thread_id, key, seq) WHERE key IS NOT NULL;
