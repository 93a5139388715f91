-- schema 12 -> 13: waits for a person (approvals and ask_user questions).

-- waits for a person: a call that needs approval, or a question (ask_user), committed
-- by its slice instead of an outbox entry; the whole history stays (a decision updates
-- its row). The thread counts it in `awaiting`: an approval puts the call in the outbox,
-- a denial, an expiry or an answer admits its tool result, in the decision's transaction.
CREATE TABLE approvals (
    id                INTEGER PRIMARY KEY,
    thread_id         TEXT NOT NULL REFERENCES threads(id),
    tenant            TEXT NOT NULL,
    call_id           TEXT NOT NULL,
    kind              TEXT NOT NULL CHECK (kind IN ('approval', 'question')),
    tool              TEXT NOT NULL,
    arguments         TEXT NOT NULL,
    idempotent        INTEGER NOT NULL DEFAULT 0,
    role              TEXT,
    deadline          REAL NOT NULL DEFAULT 0,
    escalate_role     TEXT,
    escalate_s        REAL NOT NULL DEFAULT 0,
    status            TEXT NOT NULL DEFAULT 'requested'
                      CHECK (status IN ('requested', 'escalated', 'approved', 'edited', 'denied',
                                        'expired', 'answered')),
    decision_key      TEXT,
    decided_by        TEXT,
    note              TEXT,
    decided_arguments TEXT,
    requested_at      REAL NOT NULL,
    decided_at        REAL,
    UNIQUE (thread_id, call_id)
);
CREATE INDEX approvals_open ON approvals (tenant, id) WHERE status IN ('requested', 'escalated');
CREATE INDEX approvals_due ON approvals (deadline)
    WHERE status IN ('requested', 'escalated') AND deadline > 0;
