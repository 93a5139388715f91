-- schema 14 -> 15: fewer bytes per agent.
-- (1) No index on the dedup keys' admitted_at. It took as many bytes per key as the key
-- itself; retention now forgets old keys by walking the primary key a window at a time.
DROP INDEX input_keys_admitted;

-- (2) Messages keyed by their thread's number (threads.rid, a few bytes) instead of its
-- id, in the table and in its (thread, seq) index; the messages view gives reads the
-- thread id back. The rid is a column of its own, not the rowid (VACUUM may renumber
-- that); existing threads are numbered by their rowid.
ALTER TABLE threads ADD COLUMN rid INTEGER;
UPDATE threads SET rid = rowid;
CREATE UNIQUE INDEX threads_rid ON threads (rid);
CREATE TABLE message_rows (
    id           INTEGER PRIMARY KEY,
    thread_rid   INTEGER NOT NULL REFERENCES threads(rid),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    tool_calls   TEXT,
    tool_call_id TEXT,
    name         TEXT,
    source       TEXT,
    input_id     INTEGER,
    created_at   REAL NOT NULL,
    tokens       INTEGER,
    finish_reason    TEXT,
    reasoning        TEXT,
    usage_prompt     INTEGER,
    usage_completion INTEGER,
    usage_cached     INTEGER,
    parts            TEXT
);
INSERT INTO message_rows (id, thread_rid, seq, role, content, tool_calls, tool_call_id, name, source,
                          input_id, created_at, tokens, finish_reason, reasoning, usage_prompt,
                          usage_completion, usage_cached, parts)
SELECT m.id, t.rid, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.name, m.source,
       m.input_id, m.created_at, m.tokens, m.finish_reason, m.reasoning, m.usage_prompt,
       m.usage_completion, m.usage_cached, m.parts
FROM messages m JOIN threads t ON t.id = m.thread_id ORDER BY m.id;
DROP TABLE messages;
CREATE UNIQUE INDEX message_rows_thread_seq ON message_rows (thread_rid, seq);
CREATE VIEW messages AS
SELECT m.id, t.id AS thread_id, m.seq, m.role, m.content, m.tool_calls, m.tool_call_id, m.name,
       m.source, m.input_id, m.created_at, m.tokens, m.finish_reason, m.reasoning,
       m.usage_prompt, m.usage_completion, m.usage_cached, m.parts
FROM message_rows m JOIN threads t ON t.rid = m.thread_rid;
