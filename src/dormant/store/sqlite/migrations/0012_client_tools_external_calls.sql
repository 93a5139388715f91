-- schema 11 -> 12: client tools. A thread keeps the tools its client runs itself (JSON
-- function schemas, set by the newest input that carried some), and a call to one is an
-- outbox entry of status 'external': never claimed by a dispatcher, answered from outside.
-- SQLite cannot change a CHECK constraint in place: the outbox is rebuilt, rows kept.
ALTER TABLE threads ADD COLUMN client_tools TEXT;
CREATE TABLE outbox_v12 (
    id            INTEGER PRIMARY KEY,
    thread_id     TEXT NOT NULL REFERENCES threads(id),
    agent         TEXT NOT NULL,
    call_id       TEXT NOT NULL,
    tool          TEXT NOT NULL,
    arguments     TEXT NOT NULL,
    idempotent    INTEGER NOT NULL,
    status        TEXT NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'dead', 'unknown', 'external')),
    attempts      INTEGER NOT NULL DEFAULT 0,
    available_at  REAL NOT NULL,
    lease_token   TEXT,
    lease_owner   TEXT,
    lease_expires REAL NOT NULL DEFAULT 0,
    last_error    TEXT,
    created_at    REAL NOT NULL,
    finished_at   REAL,
    UNIQUE (thread_id, call_id)
);
INSERT INTO outbox_v12 (id, thread_id, agent, call_id, tool, arguments, idempotent, status,
                        attempts, available_at, lease_token, lease_owner, lease_expires,
                        last_error, created_at, finished_at)
SELECT id, thread_id, agent, call_id, tool, arguments, idempotent, status, attempts,
       available_at, lease_token, lease_owner, lease_expires, last_error, created_at, finished_at
FROM outbox;
DROP TABLE outbox;
ALTER TABLE outbox_v12 RENAME TO outbox;
CREATE INDEX outbox_pending ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_running ON outbox (lease_expires) WHERE status = 'running';
