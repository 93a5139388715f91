-- schema 6 -> 7: what the model server said about each reply (issue 14): on an assistant
-- message its finish_reason ('length': cut by the output cap), its reasoning (kept apart
-- from the answer) and the tokens the server counted; on a thread those tokens summed, and
-- the wait of a thread whose model endpoint is down (reason, until when).
ALTER TABLE messages ADD COLUMN finish_reason TEXT;
ALTER TABLE messages ADD COLUMN reasoning TEXT;
ALTER TABLE messages ADD COLUMN usage_prompt INTEGER;
ALTER TABLE messages ADD COLUMN usage_completion INTEGER;
ALTER TABLE messages ADD COLUMN usage_cached INTEGER;
ALTER TABLE threads ADD COLUMN usage_prompt INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN usage_completion INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN usage_cached INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN wait_reason TEXT;
ALTER TABLE threads ADD COLUMN wait_until REAL NOT NULL DEFAULT 0;
CREATE INDEX threads_waiting ON threads (wait_reason) WHERE wait_reason IS NOT NULL;
