-- schema 14 -> 15: no index on the dedup keys' admitted_at. It took as many bytes per key
-- as the key itself (a tenth of the file at a million agents); retention now forgets old
-- keys by walking the primary key a window at a time.
DROP INDEX input_keys_admitted;
