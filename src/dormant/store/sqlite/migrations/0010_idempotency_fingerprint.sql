-- schema 9 -> 10: a dedup key keeps the fingerprint of the request that admitted it (a
-- hash of an Idempotency-Key's request body, bounded in size), so the same key sent
-- with another body is refused instead of being answered as a duplicate. Keys admitted
-- before have none: any body matches them.
ALTER TABLE input_keys ADD COLUMN fingerprint TEXT;
