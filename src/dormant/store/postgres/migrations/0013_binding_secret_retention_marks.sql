-- schema 12 -> 13: binding keys become keyed hashes, and pruned history is visible.
-- The binding secret binding keys are made under (HMAC-SHA256): the sha256 of two
-- gen_random_uuid() (PostgreSQL's strong random source, 244 random bits), made with the
-- store. A store that already holds memories or subjects is marked: its keys are of the
-- previous scheme (b1_, sha256 of the parts) and are moved to their new key when their
-- identity is next bound. retention_marks: per thread, the messages a retention policy
-- deleted (how many, up to which seq, under which policy), shown where history is read.
INSERT INTO memory_meta VALUES ('binding_secret',
    encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex'))
ON CONFLICT (name) DO NOTHING;
INSERT INTO memory_meta SELECT 'binding_legacy', '1'
WHERE EXISTS (SELECT 1 FROM memory_records) OR EXISTS (SELECT 1 FROM memory_identity)
   OR EXISTS (SELECT 1 FROM memory_moves) OR EXISTS (SELECT 1 FROM memory_links)
   OR EXISTS (SELECT 1 FROM threads WHERE subject IS NOT NULL)
   OR EXISTS (SELECT 1 FROM inputs WHERE source LIKE 'b1\_%')
ON CONFLICT (name) DO NOTHING;
CREATE TABLE retention_marks (
    thread_id text COLLATE "C" PRIMARY KEY,
    pruned    bigint NOT NULL,
    up_to_seq bigint NOT NULL,
    policy    text NOT NULL,
    pruned_at double precision NOT NULL
);
