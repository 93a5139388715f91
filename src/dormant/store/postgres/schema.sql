-- dormant PostgreSQL schema. This file is the truth for a new database; migrations/
-- NNNN_*.sql bring older databases to the same shape. Times are Unix seconds (double
-- precision) of the database server's clock as each worker estimates it (backend.DbClock),
-- so clock skew between hosts moves no lease; heartbeats use now() itself.
--
-- The hot write paths are functions (dormant_*): one statement per domain operation,
-- so a slice commit is one round trip however many rows it writes. They raise with
-- SQLSTATEs of class DM, which driver.translate() maps to dormant errors:
--   DM001 lease lost   DM002 not found   DM003 the plan does not fit the stored state

CREATE TABLE schema_version (
    version integer NOT NULL
);

-- Keys use the "C" collation: byte order (as SQLite's), whatever the database default.
-- fillfactor < 100 leaves room on each page so lease and readiness updates stay HOT-ish
CREATE TABLE threads (
    id            text COLLATE "C" PRIMARY KEY,
    agent         text NOT NULL,
    parent_id     text COLLATE "C" REFERENCES threads (id),
    parent_seq    bigint NOT NULL DEFAULT 0,
    status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'failed')),
    last_seq      bigint NOT NULL DEFAULT 0,
    awaiting      integer NOT NULL DEFAULT 0,
    failures      integer NOT NULL DEFAULT 0,
    error         text,
    -- scheduling: smallest sort_key / not_before among consumable pending inputs
    ready_key     double precision,
    ready_at      double precision,
    lease_token   text,
    lease_owner   text,
    lease_expires double precision NOT NULL DEFAULT 0,
    created_at    double precision NOT NULL,
    updated_at    double precision NOT NULL,
    -- prompt tokens of the thread's own messages, and of those its latest summary covers
    tokens            bigint NOT NULL DEFAULT 0,
    summarized_tokens bigint NOT NULL DEFAULT 0,
    summary_seq       bigint NOT NULL DEFAULT 0,
    -- the tenant of `dormant serve` owning the thread ('' for the library's default tenant):
    -- a tenant's thread ids start with its id (t + 12 hex digits) and '/', so children,
    -- whose ids extend their parent's, inherit it
    tenant            text COLLATE "C" GENERATED ALWAYS AS (CASE WHEN substr(id, 14, 1) = '/' AND left(id, 1) = 't' THEN left(id, 13) ELSE '' END) STORED,
    -- runs ended (agent-declared units; by default one per user turn): checkpoint cadence
    runs              bigint NOT NULL DEFAULT 0,
    -- tokens the model server counted for the thread's committed slices
    usage_prompt      bigint NOT NULL DEFAULT 0,
    usage_completion  bigint NOT NULL DEFAULT 0,
    usage_cached      bigint NOT NULL DEFAULT 0,
    -- why (and until when) the thread waits on its model endpoint, uncounted as a failure
    wait_reason       text,
    wait_until        double precision NOT NULL DEFAULT 0,
    -- the thread's state journal replayed, as JSON text (key -> JSON value), written by the
    -- commit that journals changes; NULL: not carried (over 64 KiB, or written before
    -- schema 11): replay the journal. Its subject (a binding key), for a subject's threads.
    state             text DEFAULT '{}',
    subject           text COLLATE "C",
    -- the tools the thread's client runs itself (JSON function schemas), shown to the model;
    -- set by the newest admitted input that carried some (NULL: none)
    client_tools      text
) WITH (fillfactor = 80, autovacuum_vacuum_scale_factor = 0.02);
-- the claim walks the tenants with ready work, each one's threads by ready_key (CLAIM_THREADS)
CREATE INDEX threads_ready ON threads (tenant, ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX threads_tenant ON threads (tenant) WHERE tenant <> '';
CREATE INDEX threads_waiting ON threads (wait_reason) WHERE wait_reason IS NOT NULL;
CREATE INDEX threads_subject ON threads (subject, tenant) WHERE subject IS NOT NULL;
CREATE INDEX threads_leased ON threads (lease_expires) WHERE lease_token IS NOT NULL;
-- Children of a thread (deleting a thread takes its descendants).
CREATE INDEX threads_parent ON threads (parent_id) WHERE parent_id IS NOT NULL;

-- Input ids come from one sequence: never reused, increasing in admission order.
CREATE SEQUENCE input_ids;

-- Pending inputs only: the slice that consumes an input deletes it in its transaction
-- (the message made from it keeps its id). A queue table: vacuum it eagerly.
CREATE TABLE inputs (
    id          bigint PRIMARY KEY,
    thread_id   text COLLATE "C" NOT NULL REFERENCES threads (id),
    dedup_key   text COLLATE "C" NOT NULL,
    kind        text NOT NULL,
    priority    smallint NOT NULL,
    not_before  double precision NOT NULL,
    admitted_at double precision NOT NULL,
    sort_key    double precision NOT NULL,
    content     text NOT NULL,
    call_id     text,
    tool_name   text,
    is_error    boolean NOT NULL DEFAULT false,
    source      text,
    parts       text  -- images and files: JSON references to blobs and their facts
) WITH (autovacuum_vacuum_scale_factor = 0.01);
CREATE INDEX inputs_thread ON inputs (thread_id, id);

-- Every dedup key admitted within the dedup horizon (retention prunes older ones whose
-- input was consumed): a repeated (thread, key) is a duplicate, and one whose request
-- fingerprint differs from the stored one is refused (idempotency_mismatch).
CREATE TABLE input_keys (
    thread_id   text COLLATE "C" NOT NULL,
    dedup_key   text COLLATE "C" NOT NULL,
    input_id    bigint NOT NULL,
    -- when its input was admitted: retention prunes keys past the dedup horizon
    admitted_at double precision NOT NULL DEFAULT 0,
    -- a hash of the request that admitted it (an Idempotency-Key's body), or NULL
    fingerprint text COLLATE "C",
    PRIMARY KEY (thread_id, dedup_key)
);
CREATE INDEX input_keys_admitted ON input_keys (admitted_at);

CREATE TABLE messages (
    thread_id    text COLLATE "C" NOT NULL REFERENCES threads (id),
    seq          bigint NOT NULL,
    role         text NOT NULL,
    content      text NOT NULL,
    tool_calls   text,
    tool_call_id text,
    name         text,
    source       text,
    input_id     bigint,
    created_at   double precision NOT NULL,
    tokens       integer,  -- counted when written; NULL on rows written before schema 2
    -- an assistant message: the server's finish_reason ('length': cut by the output cap),
    -- the model's reasoning (apart from the answer), the tokens the server counted
    finish_reason    text,
    reasoning        text,
    usage_prompt     integer,
    usage_completion integer,
    usage_cached     integer,
    -- images and files: JSON references to blobs and their facts; NULL: none
    parts            text,
    PRIMARY KEY (thread_id, seq)
);

-- Compaction summaries: the originals stay in messages. made_at_seq is the thread's
-- last_seq when the summary was written (a child spawned before it never sees it).
CREATE TABLE summaries (
    thread_id      text COLLATE "C" NOT NULL REFERENCES threads (id),
    upto_seq       bigint NOT NULL,
    made_at_seq    bigint NOT NULL,
    content        text NOT NULL,
    tokens         integer NOT NULL,
    covered_tokens bigint NOT NULL,
    created_at     double precision NOT NULL,
    PRIMARY KEY (thread_id, upto_seq)
);

-- Large tool outputs, stored once by content (ref = 'sha256:<hex>'), in chunks.
-- A blob being written lives under a 'tmp:' ref until its hash is known.
CREATE TABLE blobs (
    ref        text COLLATE "C" PRIMARY KEY,
    size       bigint NOT NULL,
    chunk_size integer NOT NULL,
    created_at double precision NOT NULL
);
CREATE TABLE blob_chunks (
    ref  text COLLATE "C" NOT NULL,
    idx  integer NOT NULL,
    data bytea NOT NULL,
    PRIMARY KEY (ref, idx)
);
-- Chunks are compressed data or text already cut to size: store them out of line,
-- uncompressed, so a range read fetches only the chunks it needs.
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;
-- Which threads refer to which blobs: a blob no thread refers to is garbage.
CREATE TABLE blob_refs (
    thread_id text COLLATE "C" NOT NULL,
    ref       text COLLATE "C" NOT NULL,
    PRIMARY KEY (thread_id, ref)
);
CREATE INDEX blob_refs_ref ON blob_refs (ref);

-- Open async tool calls. A call that completes is deleted in the transaction that
-- admits its result; dead-lettered and unknown calls stay for inspection.
CREATE TABLE outbox (
    id            bigserial PRIMARY KEY,
    thread_id     text COLLATE "C" NOT NULL REFERENCES threads (id),
    agent         text NOT NULL,
    call_id       text COLLATE "C" NOT NULL,
    tool          text NOT NULL,
    arguments     text NOT NULL,
    idempotent    boolean NOT NULL,
    status        text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'running', 'dead', 'unknown', 'external')),
    attempts      integer NOT NULL DEFAULT 0,
    available_at  double precision NOT NULL,
    lease_token   text,
    lease_owner   text,
    lease_expires double precision NOT NULL DEFAULT 0,
    last_error    text,
    created_at    double precision NOT NULL,
    finished_at   double precision,
    UNIQUE (thread_id, call_id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX outbox_pending ON outbox (available_at) WHERE status = 'pending';
CREATE INDEX outbox_running ON outbox (lease_expires) WHERE status = 'running';

-- Worker processes and their heartbeats, by the database clock (now()): the leases of a
-- worker whose heartbeat is older than a few seconds are free at once (it died), without
-- waiting for them to expire. Rows of workers gone for an hour are removed.
CREATE TABLE workers (
    id           text COLLATE "C" PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    started_at   timestamptz NOT NULL,
    heartbeat_at timestamptz NOT NULL
);

-- The state journal: per thread, change records (add/update/delete of a key, value
-- as JSON text) written in the slice's transaction, and checkpoint headers (full or
-- incremental) whose body lives in state_parts. A checkpoint counts for recovery only
-- once recoverable, set after its parts were written and verified.
CREATE TABLE state_journal (
    thread_id   text COLLATE "C" NOT NULL REFERENCES threads (id),
    seq         bigint NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('add', 'update', 'delete', 'full', 'incremental')),
    key         text,
    value       text,
    run         bigint NOT NULL DEFAULT 0,
    upto        bigint NOT NULL DEFAULT 0,
    parts       integer NOT NULL DEFAULT 0,
    size        bigint NOT NULL DEFAULT 0,
    digest      text,
    recoverable boolean NOT NULL DEFAULT false,
    created_at  double precision NOT NULL,
    -- the thread's last message seq when written (fork and rewind branch there)
    msg_seq     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (thread_id, seq)
);
CREATE INDEX state_journal_checkpoints ON state_journal (thread_id, kind, seq)
    WHERE kind IN ('full', 'incremental');
CREATE INDEX state_journal_keys ON state_journal (thread_id, key, seq) WHERE key IS NOT NULL;
CREATE TABLE state_parts (
    thread_id text COLLATE "C" NOT NULL,
    seq       bigint NOT NULL,
    idx       integer NOT NULL,
    data      text NOT NULL,
    PRIMARY KEY (thread_id, seq, idx)
);

-- Admit one input. A known (thread, key) changes nothing and answers the first input's
-- id with r_duplicate = true. The sort key is computed by the caller (dormant.inbox).
CREATE FUNCTION dormant_admit_one(
    p_thread text, p_agent text, p_key text, p_kind text, p_priority smallint,
    p_not_before double precision, p_sort_key double precision, p_content text,
    p_call_id text, p_tool text, p_is_error boolean, p_source text, p_now double precision,
    OUT r_input_id bigint, OUT r_duplicate boolean
) LANGUAGE plpgsql AS $$
BEGIN
    IF p_agent IS NOT NULL THEN
        INSERT INTO threads (id, agent, created_at, updated_at)
        VALUES (p_thread, p_agent, p_now, p_now)
        ON CONFLICT (id) DO NOTHING;
    ELSIF NOT EXISTS (SELECT 1 FROM threads t WHERE t.id = p_thread) THEN
        RAISE EXCEPTION USING ERRCODE = 'DM002',
            MESSAGE = format('no thread %L (pass an agent to create it)', p_thread);
    END IF;
    -- the key row first: a concurrent admission of the same key waits here, then
    -- sees a conflict and reads the winner's id below (each statement has a new snapshot)
    INSERT INTO input_keys AS k (thread_id, dedup_key, input_id, admitted_at)
    VALUES (p_thread, p_key, nextval('input_ids'), p_now)
    ON CONFLICT DO NOTHING
    RETURNING k.input_id INTO r_input_id;
    IF r_input_id IS NULL THEN
        SELECT k.input_id INTO r_input_id
        FROM input_keys k WHERE k.thread_id = p_thread AND k.dedup_key = p_key;
        r_duplicate := true;
        RETURN;
    END IF;
    INSERT INTO inputs (id, thread_id, dedup_key, kind, priority, not_before, admitted_at,
                        sort_key, content, call_id, tool_name, is_error, source)
    VALUES (r_input_id, p_thread, p_key, p_kind, p_priority, p_not_before, p_now,
            p_sort_key, p_content, p_call_id, p_tool, p_is_error, p_source);
    UPDATE threads t
    SET ready_key = LEAST(coalesce(t.ready_key, p_sort_key), p_sort_key),
        ready_at = LEAST(coalesce(t.ready_at, p_not_before), p_not_before)
    WHERE t.id = p_thread AND t.status = 'active' AND (t.awaiting = 0 OR p_kind = 'tool_result');
    r_duplicate := false;
END
$$;

-- The multi-row operations below take their rows as one jsonb document (the records'
-- msgspec encoding, see records.py): one parameter instead of dozens of arrays.

-- Admit a batch of NewInput records, in order; sort keys come in a parallel array. An
-- item with a fingerprint stores it with its key; a duplicate whose stored fingerprint
-- differs raises DM004 (idempotency_mismatch), and the whole batch is undone.
CREATE FUNCTION dormant_admit(p_items jsonb, p_sort_keys double precision[], p_now double precision)
RETURNS TABLE (r_input_id bigint, r_duplicate boolean) LANGUAGE plpgsql AS $$
DECLARE
    a record;
    i integer := 0;
    v_known text;
BEGIN
    FOR a IN
        SELECT * FROM jsonb_to_recordset(p_items) AS x (
            thread_id text, kind text, dedup_key text, content text, priority smallint,
            not_before double precision, call_id text, tool_name text, is_error boolean,
            source text, agent text, fingerprint text, tools text)
    LOOP
        i := i + 1;
        SELECT o.r_input_id, o.r_duplicate INTO r_input_id, r_duplicate
        FROM dormant_admit_one(a.thread_id, a.agent, a.dedup_key, a.kind, a.priority, a.not_before,
                               p_sort_keys[i], a.content, a.call_id, a.tool_name, a.is_error,
                               a.source, p_now) o;
        IF a.fingerprint IS NOT NULL THEN
            IF r_duplicate THEN
                SELECT k.fingerprint INTO v_known
                FROM input_keys k WHERE k.thread_id = a.thread_id AND k.dedup_key = a.dedup_key;
                IF v_known IS NOT NULL AND v_known <> a.fingerprint THEN
                    RAISE EXCEPTION USING ERRCODE = 'DM004',
                        MESSAGE = format('the dedup key of thread %L was used with a different request',
                                         a.thread_id);
                END IF;
            ELSE
                UPDATE input_keys k SET fingerprint = a.fingerprint
                WHERE k.thread_id = a.thread_id AND k.dedup_key = a.dedup_key;
            END IF;
        END IF;
        IF a.tools IS NOT NULL AND NOT r_duplicate THEN
            -- the client's tools become its thread's ('[]': none)
            UPDATE threads t SET client_tools = nullif(a.tools, '[]') WHERE t.id = a.thread_id;
        END IF;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Apply a slice's CommitPlan and release the lease, or raise and change nothing.
-- p_sort_keys: one per admission of the plan.
CREATE FUNCTION dormant_commit_slice(
    p_plan jsonb, p_sort_keys double precision[], p_now double precision
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_thread text := p_plan ->> 'thread_id';
    v_awaiting integer := (p_plan ->> 'awaiting')::integer;
    v_consumed bigint[];
    v_messages integer := jsonb_array_length(p_plan -> 'messages');
    v_first bigint := (p_plan -> 'messages' -> 0 ->> 'seq')::bigint;
    v_token text;
    v_last bigint;
    v_agent text;
    v_deleted integer;
    v_summary jsonb := p_plan -> 'summary';
    v_summary_seq bigint;
    v_tokens bigint := (SELECT coalesce(sum((m ->> 'tokens')::bigint), 0)
                        FROM jsonb_array_elements(p_plan -> 'messages') m);
    v_usage jsonb := p_plan -> 'usage';
BEGIN
    SELECT t.lease_token, t.last_seq, t.agent, t.summary_seq
    INTO v_token, v_last, v_agent, v_summary_seq
    FROM threads t WHERE t.id = v_thread FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'DM002', MESSAGE = format('no thread %L', v_thread);
    END IF;
    IF v_token IS DISTINCT FROM p_plan ->> 'token' THEN
        RAISE EXCEPTION USING ERRCODE = 'DM001',
            MESSAGE = format('lease on thread %L was lost before commit', v_thread);
    END IF;
    IF jsonb_typeof(v_summary) = 'object' THEN
        -- a summary moves forward and covers stored messages only
        IF (v_summary ->> 'upto_seq')::bigint <= v_summary_seq
           OR (v_summary ->> 'upto_seq')::bigint > v_last THEN
            RAISE EXCEPTION USING ERRCODE = 'DM003',
                MESSAGE = format('the summary of %L does not move forward over stored messages', v_thread);
        END IF;
        INSERT INTO summaries (thread_id, upto_seq, made_at_seq, content, tokens, covered_tokens,
                               created_at)
        VALUES (v_thread, (v_summary ->> 'upto_seq')::bigint, (v_summary ->> 'made_at_seq')::bigint,
                v_summary ->> 'content', (v_summary ->> 'tokens')::integer,
                (v_summary ->> 'covered_tokens')::bigint,
                coalesce(nullif((v_summary ->> 'created_at')::double precision, 0), p_now));
    ELSE
        v_summary := NULL;
    END IF;
    IF jsonb_array_length(p_plan -> 'consumed') > 0 THEN
        v_consumed := ARRAY(SELECT jsonb_array_elements_text(p_plan -> 'consumed')::bigint);
        DELETE FROM inputs i WHERE i.thread_id = v_thread AND i.id = ANY (v_consumed);
        GET DIAGNOSTICS v_deleted = ROW_COUNT;
        IF v_deleted <> cardinality(v_consumed) THEN
            RAISE EXCEPTION USING ERRCODE = 'DM003',
                MESSAGE = format('an input consumed by %L is not pending', v_thread);
        END IF;
    END IF;
    IF v_messages > 0 THEN
        -- the caller checked that the plan's seqs are consecutive
        IF v_first <> v_last + 1 THEN
            RAISE EXCEPTION USING ERRCODE = 'DM003',
                MESSAGE = format('the messages of %L do not continue its history', v_thread);
        END IF;
        INSERT INTO messages (thread_id, seq, role, content, tool_calls, tool_call_id, name,
                              source, input_id, created_at, tokens, finish_reason, reasoning,
                              usage_prompt, usage_completion, usage_cached)
        SELECT v_thread, m.seq, m.role, m.content,
               CASE WHEN jsonb_array_length(m.tool_calls) > 0 THEN m.tool_calls::text END,
               m.tool_call_id, m.name, m.source, m.input_id, coalesce(nullif(m.created_at, 0), p_now),
               m.tokens, m.finish_reason, m.reasoning, (m.usage ->> 'prompt')::integer,
               (m.usage ->> 'completion')::integer, (m.usage ->> 'cached')::integer
        FROM jsonb_to_recordset(p_plan -> 'messages') AS m (
            seq bigint, role text, content text, tool_calls jsonb, tool_call_id text, name text,
            source text, input_id bigint, created_at double precision, tokens integer,
            finish_reason text, reasoning text, usage jsonb);
    END IF;
    IF jsonb_array_length(p_plan -> 'calls') > 0 THEN
        -- a call to a client's tool is external: no dispatcher claims it
        INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at,
                            created_at, status)
        SELECT v_thread, v_agent, c.call_id, c.tool, c.arguments, c.idempotent, p_now, p_now,
               CASE WHEN c.external THEN 'external' ELSE 'pending' END
        FROM jsonb_to_recordset(p_plan -> 'calls')
             AS c (call_id text, tool text, arguments text, idempotent boolean, external boolean);
    END IF;
    IF jsonb_array_length(p_plan -> 'threads') > 0 THEN
        INSERT INTO threads (id, agent, parent_id, parent_seq, created_at, updated_at)
        SELECT t.id, t.agent, t.parent_id, t.parent_seq, p_now, p_now
        FROM jsonb_to_recordset(p_plan -> 'threads')
             AS t (id text, agent text, parent_id text, parent_seq bigint);
    END IF;
    UPDATE threads t SET
        last_seq = CASE WHEN v_messages > 0 THEN v_first + v_messages - 1 ELSE t.last_seq END,
        awaiting = v_awaiting, failures = 0, error = NULL,
        lease_token = NULL, lease_owner = NULL, lease_expires = 0, updated_at = p_now,
        tokens = t.tokens + v_tokens,
        runs = t.runs + coalesce((p_plan ->> 'runs')::bigint, 0),
        usage_prompt = t.usage_prompt + coalesce((v_usage ->> 'prompt')::bigint, 0),
        usage_completion = t.usage_completion + coalesce((v_usage ->> 'completion')::bigint, 0),
        usage_cached = t.usage_cached + coalesce((v_usage ->> 'cached')::bigint, 0),
        wait_reason = NULL, wait_until = 0,
        -- the row's journal state: the slice's, or unknown (NULL) once changes it did not give
        state = CASE WHEN jsonb_typeof(p_plan -> 'state_json') = 'string' THEN p_plan ->> 'state_json'
                     WHEN jsonb_array_length(coalesce(p_plan -> 'state', '[]'::jsonb)) > 0 THEN NULL
                     ELSE t.state END,
        subject = coalesce(p_plan ->> 'subject', t.subject),
        summary_seq = coalesce((v_summary ->> 'upto_seq')::bigint, t.summary_seq),
        summarized_tokens = coalesce((v_summary ->> 'covered_tokens')::bigint, t.summarized_tokens),
        ready_key = (SELECT min(i.sort_key) FROM inputs i
                     WHERE i.thread_id = v_thread AND (v_awaiting = 0 OR i.kind = 'tool_result')),
        ready_at = (SELECT min(i.not_before) FROM inputs i
                    WHERE i.thread_id = v_thread AND (v_awaiting = 0 OR i.kind = 'tool_result'))
    WHERE t.id = v_thread;
    IF jsonb_array_length(coalesce(p_plan -> 'state', '[]'::jsonb)) > 0 THEN
        -- state change records, numbered after the journal's newest (the thread row is locked)
        INSERT INTO state_journal (thread_id, seq, kind, key, value, run, created_at, msg_seq)
        SELECT v_thread,
               (SELECT coalesce(max(j.seq), 0) FROM state_journal j WHERE j.thread_id = v_thread) + e.n,
               e.c ->> 'op', e.c ->> 'key', e.c ->> 'value', t.runs, p_now, t.last_seq
        FROM threads t, jsonb_array_elements(p_plan -> 'state') WITH ORDINALITY AS e (c, n)
        WHERE t.id = v_thread;
    END IF;
    IF jsonb_array_length(p_plan -> 'admissions') > 0 THEN
        PERFORM 1 FROM dormant_admit(p_plan -> 'admissions', p_sort_keys, p_now);
    END IF;
END
$$;

-- Record dispatcher outcomes (OutboxOutcome records); done/dead admit the result
-- (dedup key = call id). Answers, per outcome, whether its lease was still held.
CREATE FUNCTION dormant_finish_outbox(
    p_outcomes jsonb, p_now double precision, p_result_key double precision
) RETURNS SETOF boolean LANGUAGE plpgsql AS $$
DECLARE
    o record;
    v_thread text;
    v_call text;
    v_tool text;
BEGIN
    FOR o IN
        SELECT * FROM jsonb_to_recordset(p_outcomes) AS x (
            entry_id bigint, token text, kind text, content text, is_error boolean,
            retry_at double precision, error text)
    LOOP
        IF o.kind = 'retry' THEN
            UPDATE outbox b SET status = 'pending', available_at = o.retry_at,
                last_error = o.error, lease_token = NULL, lease_owner = NULL, lease_expires = 0
            WHERE b.id = o.entry_id AND b.status = 'running' AND b.lease_token = o.token;
            RETURN NEXT FOUND;
            CONTINUE;
        ELSIF o.kind = 'done' THEN
            DELETE FROM outbox b
            WHERE b.id = o.entry_id AND b.status = 'running' AND b.lease_token = o.token
            RETURNING b.thread_id, b.call_id, b.tool INTO v_thread, v_call, v_tool;
        ELSE
            UPDATE outbox b SET status = 'dead', finished_at = p_now, last_error = o.error,
                lease_token = NULL, lease_owner = NULL, lease_expires = 0
            WHERE b.id = o.entry_id AND b.status = 'running' AND b.lease_token = o.token
            RETURNING b.thread_id, b.call_id, b.tool INTO v_thread, v_call, v_tool;
        END IF;
        IF NOT FOUND THEN
            RETURN NEXT false;
            CONTINUE;
        END IF;
        PERFORM 1 FROM dormant_admit_one(v_thread, NULL, v_call, 'tool_result', 1::smallint, 0,
                                         p_result_key, o.content, v_call, v_tool, o.is_error,
                                         NULL, p_now);
        RETURN NEXT true;
    END LOOP;
END
$$;

-- Reconcile running entries whose lease expired or whose worker stopped heartbeating
-- more than p_dead seconds ago by the database clock (idempotent: pending again;
-- others: 'unknown' with p_unknown admitted as their error result), then lease due
-- entries, only those whose agent || chr(31) || tool is in p_tools (unless NULL: a
-- worker claims only the calls of tools it has). Locks are skipped, not waited for:
-- another worker may be doing the same.
CREATE FUNCTION dormant_claim_outbox(
    p_worker text, p_limit integer, p_token text, p_now double precision,
    p_expires double precision, p_result_key double precision, p_unknown text,
    p_dead double precision, p_tools text[]
) RETURNS SETOF outbox LANGUAGE plpgsql AS $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT o.id, o.thread_id, o.call_id, o.tool, o.idempotent FROM outbox o
        WHERE o.status = 'running'
          AND (o.lease_expires <= p_now
               OR o.lease_owner IN (SELECT w.id FROM workers w
                                    WHERE w.heartbeat_at < now() - make_interval(secs => p_dead)))
        ORDER BY o.lease_expires LIMIT 256
        FOR NO KEY UPDATE SKIP LOCKED
    LOOP
        IF r.idempotent THEN
            UPDATE outbox o SET status = 'pending', available_at = p_now, lease_token = NULL,
                lease_owner = NULL, lease_expires = 0
            WHERE o.id = r.id;
        ELSE
            UPDATE outbox o SET status = 'unknown', finished_at = p_now, lease_token = NULL,
                lease_owner = NULL, last_error = 'lease expired while running'
            WHERE o.id = r.id;
            PERFORM 1 FROM dormant_admit_one(r.thread_id, NULL, r.call_id, 'tool_result',
                                             1::smallint, 0, p_result_key, p_unknown, r.call_id,
                                             r.tool, true, NULL, p_now);
        END IF;
    END LOOP;
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    RETURN QUERY
    WITH picked AS (
        SELECT o.id FROM outbox o
        WHERE o.status = 'pending' AND o.available_at <= p_now
          AND (p_tools IS NULL OR o.agent || chr(31) || o.tool = ANY (p_tools))
        ORDER BY o.available_at, o.id LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE outbox o SET status = 'running', attempts = o.attempts + 1, lease_token = p_token,
        lease_owner = p_worker, lease_expires = p_expires
    FROM picked WHERE o.id = picked.id
    RETURNING o.*;
END
$$;

-- A tenant's best claimable threads by ready key, at most p_limit of them, locked (SKIP
-- LOCKED: rows another claim holds are skipped). Read by walking threads_ready in key
-- order whatever the planner guesses of the tenant's size: with bitmap and sequential
-- scans on, a small guess (many small tenants, or no statistics yet) makes it fetch and
-- sort every ready thread of the tenant, a flooding one included, on every claim.
CREATE FUNCTION dormant_tenant_claimable(
    p_tenant text, p_now double precision, p_limit integer, p_agents text[], p_dead double precision
) RETURNS TABLE (r_id text, r_key double precision) LANGUAGE sql
SET enable_bitmapscan = off SET enable_seqscan = off AS $$
    SELECT t.id, t.ready_key FROM threads t
    WHERE t.tenant = p_tenant AND t.ready_key IS NOT NULL AND t.ready_at <= p_now
      AND (t.lease_expires <= p_now
           OR t.lease_owner IN (SELECT w.id FROM workers w
                                WHERE w.heartbeat_at < now() - make_interval(secs => p_dead)))
      AND (p_agents IS NULL OR t.agent = ANY (p_agents))
    ORDER BY t.ready_key
    LIMIT p_limit
    FOR NO KEY UPDATE OF t SKIP LOCKED
$$;

-- Answer an open call from outside the dispatcher: the call leaves the outbox and its
-- result is admitted. An answered call answers the existing admission as a duplicate.
CREATE FUNCTION dormant_complete_call(
    p_thread text, p_call text, p_content text, p_is_error boolean, p_now double precision,
    p_sort_key double precision, OUT r_input_id bigint, OUT r_duplicate boolean
) LANGUAGE plpgsql AS $$
DECLARE
    v_tool text;
BEGIN
    SELECT k.input_id INTO r_input_id
    FROM input_keys k WHERE k.thread_id = p_thread AND k.dedup_key = p_call;
    IF FOUND THEN
        r_duplicate := true;
        RETURN;
    END IF;
    DELETE FROM outbox o
    WHERE o.thread_id = p_thread AND o.call_id = p_call
      AND o.status IN ('pending', 'running', 'external')
    RETURNING o.tool INTO v_tool;
    IF NOT FOUND THEN
        -- answered meanwhile by another transaction (we waited for its row lock)?
        SELECT k.input_id INTO r_input_id
        FROM input_keys k WHERE k.thread_id = p_thread AND k.dedup_key = p_call;
        IF FOUND THEN
            r_duplicate := true;
            RETURN;
        END IF;
        RAISE EXCEPTION USING ERRCODE = 'DM002',
            MESSAGE = format('thread %L has no open call %L', p_thread, p_call);
    END IF;
    SELECT a.r_input_id, a.r_duplicate INTO r_input_id, r_duplicate
    FROM dormant_admit_one(p_thread, NULL, p_call, 'tool_result', 1::smallint, 0, p_sort_key,
                           p_content, p_call, v_tool, p_is_error, NULL, p_now) a;
END
$$;

-- Create a thread if it does not exist; the stored row either way.
CREATE FUNCTION dormant_create_thread(p_id text, p_agent text, p_now double precision)
RETURNS SETOF threads LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO threads (id, agent, created_at, updated_at)
    VALUES (p_id, p_agent, p_now, p_now)
    ON CONFLICT (id) DO NOTHING;
    RETURN QUERY SELECT * FROM threads t WHERE t.id = p_id;
END
$$;

-- Tenants of `dormant serve` and their API keys. A key keeps only a random salt and
-- sha256(salt || secret); its secret is shown once.
CREATE TABLE tenants (
    id         text COLLATE "C" PRIMARY KEY,
    name       text COLLATE "C" NOT NULL UNIQUE,
    created_at double precision NOT NULL
);
CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
    salt       bytea NOT NULL,
    digest     bytea NOT NULL,
    created_at double precision NOT NULL,
    revoked_at double precision
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);

-- long-term memory (issue 15; migrations/0007_memory_records.sql): records are never deleted,
-- supersession and forget set invalid_at; the pgvector column is added on first use.
CREATE TABLE memory_records (
    rid            bigserial PRIMARY KEY,
    id             text COLLATE "C" NOT NULL UNIQUE,
    tenant         text COLLATE "C" NOT NULL,
    subject        text COLLATE "C" NOT NULL,
    kind           text NOT NULL,
    text           text NOT NULL,
    tags           jsonb NOT NULL DEFAULT '{}',
    key_tag        text,
    agent          text,
    thread         text,
    importance     double precision NOT NULL,
    source_thread  text,
    source_seq     bigint,
    created_at     double precision NOT NULL,
    valid_from     double precision NOT NULL,
    invalid_at     double precision,
    last_access_at double precision,
    access_count   bigint NOT NULL DEFAULT 0,
    content_hash   text NOT NULL,
    fts            tsvector NOT NULL
);
CREATE INDEX memory_records_scope ON memory_records (tenant, subject, created_at);
CREATE INDEX memory_records_key
    ON memory_records (tenant, subject, kind, key_tag) WHERE invalid_at IS NULL AND key_tag IS NOT NULL;
-- exact duplicates among the valid records of a subject are merged, not stored twice
CREATE UNIQUE INDEX memory_records_hash
    ON memory_records (tenant, subject, content_hash) WHERE invalid_at IS NULL;
CREATE INDEX memory_records_fts ON memory_records USING gin (fts);

CREATE TABLE memory_history (
    seq       bigserial PRIMARY KEY,
    tenant    text COLLATE "C" NOT NULL,
    op        text NOT NULL,
    subject   text COLLATE "C" NOT NULL,
    record_id text COLLATE "C",
    actor     text NOT NULL,
    at        double precision NOT NULL,
    detail    text NOT NULL DEFAULT ''
);
CREATE INDEX memory_history_subject ON memory_history (tenant, subject, seq);
CREATE INDEX memory_history_record ON memory_history (record_id, seq);

-- explicit links between binding keys (stored in both directions); only these widen a scope
CREATE TABLE memory_links (
    tenant     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    other      text COLLATE "C" NOT NULL,
    created_at double precision NOT NULL,
    PRIMARY KEY (tenant, key, other)
);
-- a moved subject: writes to the old key land on the new one
CREATE TABLE memory_moves (
    tenant   text COLLATE "C" NOT NULL,
    old_key  text COLLATE "C" NOT NULL,
    new_key  text COLLATE "C" NOT NULL,
    moved_at double precision NOT NULL,
    PRIMARY KEY (tenant, old_key)
);
-- partial identity -> binding keys (a phone's own hash -> every key bound with that phone)
CREATE TABLE memory_identity (
    tenant    text COLLATE "C" NOT NULL,
    part      text COLLATE "C" NOT NULL,
    part_hash text COLLATE "C" NOT NULL,
    key       text COLLATE "C" NOT NULL,
    PRIMARY KEY (tenant, part, part_hash, key)
);
CREATE TABLE memory_dictionary (
    tenant text COLLATE "C" NOT NULL,
    grp    integer NOT NULL,
    pos    integer NOT NULL,
    term   text NOT NULL,
    PRIMARY KEY (tenant, grp, pos)
);
CREATE TABLE memory_meta (
    name  text COLLATE "C" PRIMARY KEY,
    value text NOT NULL
);
-- the binding secret binding keys are made under (HMAC-SHA256): the sha256 of two
-- gen_random_uuid() (PostgreSQL's strong random source), made with the store
INSERT INTO memory_meta VALUES ('binding_secret',
    encode(sha256(convert_to(gen_random_uuid()::text || gen_random_uuid()::text, 'UTF8')), 'hex'));

-- per thread, the messages a retention policy deleted: how many, up to which seq, under
-- which policy (shown where history is read: `dormant show`, /messages, export)
CREATE TABLE retention_marks (
    thread_id text COLLATE "C" PRIMARY KEY,
    pruned    bigint NOT NULL,
    up_to_seq bigint NOT NULL,
    policy    text NOT NULL,
    pruned_at double precision NOT NULL
);

-- waits for a person: a call that needs approval, or a question (ask_user), committed by
-- its slice instead of an outbox entry (dormant_commit_slice_v2); the whole history stays
-- (a decision updates its row: dormant_decide_approval). The thread counts it in
-- `awaiting`: an approval puts the call in the outbox, a denial, an expiry or an answer
-- admits its tool result, in the decision's transaction.
CREATE TABLE approvals (
    id                bigserial PRIMARY KEY,
    thread_id         text COLLATE "C" NOT NULL REFERENCES threads (id),
    tenant            text COLLATE "C" NOT NULL,
    call_id           text COLLATE "C" NOT NULL,
    kind              text NOT NULL CHECK (kind IN ('approval', 'question')),
    tool              text NOT NULL,
    arguments         text NOT NULL,
    idempotent        boolean NOT NULL DEFAULT false,
    role              text,
    deadline          double precision NOT NULL DEFAULT 0,
    escalate_role     text,
    escalate_s        double precision NOT NULL DEFAULT 0,
    status            text NOT NULL DEFAULT 'requested'
                      CHECK (status IN ('requested', 'escalated', 'approved', 'edited', 'denied',
                                        'expired', 'answered')),
    decision_key      text,
    decided_by        text,
    note              text,
    decided_arguments text,
    requested_at      double precision NOT NULL,
    decided_at        double precision,
    UNIQUE (thread_id, call_id)
);
CREATE INDEX approvals_open ON approvals (tenant, id) WHERE status IN ('requested', 'escalated');
CREATE INDEX approvals_due ON approvals (deadline)
    WHERE status IN ('requested', 'escalated') AND deadline > 0;

-- dormant_commit_slice, and the plan's waits for a person in the same transaction
CREATE FUNCTION dormant_commit_slice_v2(
    p_plan jsonb, p_sort_keys double precision[], p_now double precision
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_thread text := p_plan ->> 'thread_id';
BEGIN
    PERFORM dormant_commit_slice(p_plan, p_sort_keys, p_now);
    IF jsonb_array_length(coalesce(p_plan -> 'approvals', '[]'::jsonb)) > 0 THEN
        INSERT INTO approvals (thread_id, tenant, call_id, kind, tool, arguments, idempotent, role,
                               deadline, escalate_role, escalate_s, requested_at)
        SELECT v_thread, t.tenant, a.call_id, a.kind, a.tool, a.arguments, a.idempotent, a.role,
               a.deadline, a.escalate_role, a.escalate_s, p_now
        FROM threads t, jsonb_to_recordset(p_plan -> 'approvals') AS a (
            call_id text, kind text, tool text, arguments text, idempotent boolean, role text,
            deadline double precision, escalate_role text, escalate_s double precision)
        WHERE t.id = v_thread;
    END IF;
END
$$;

-- Act on an open wait: approved/edited put the call in the outbox (p_arguments), denied,
-- expired and answered admit p_result as its tool result, escalated hands it to p_role
-- until p_deadline. The answer: {"fresh": whether this call acted, "row": the row as it
-- stands}; NULL when the thread has no such wait.
CREATE FUNCTION dormant_decide_approval(
    p_thread text, p_call text, p_status text, p_key text, p_by text, p_note text,
    p_arguments text, p_role text, p_deadline double precision, p_result text,
    p_now double precision, p_sort_key double precision
) RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    a approvals;
BEGIN
    IF p_status = 'escalated' THEN
        UPDATE approvals x SET status = 'escalated', role = p_role, deadline = p_deadline,
            escalate_role = NULL, escalate_s = 0
        WHERE x.thread_id = p_thread AND x.call_id = p_call AND x.status = 'requested'
        RETURNING * INTO a;
    ELSE
        UPDATE approvals x SET status = p_status, decision_key = p_key, decided_by = p_by,
            note = p_note, decided_arguments = p_arguments, decided_at = p_now
        WHERE x.thread_id = p_thread AND x.call_id = p_call
          AND x.status IN ('requested', 'escalated')
        RETURNING * INTO a;
    END IF;
    IF NOT FOUND THEN
        SELECT * INTO a FROM approvals x WHERE x.thread_id = p_thread AND x.call_id = p_call;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        RETURN jsonb_build_object('fresh', false, 'row', to_jsonb(a));
    END IF;
    IF p_status IN ('approved', 'edited') THEN
        INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at,
                            created_at)
        SELECT a.thread_id, t.agent, a.call_id, a.tool, p_arguments, a.idempotent, p_now, p_now
        FROM threads t WHERE t.id = a.thread_id;
    ELSIF p_status IN ('denied', 'expired', 'answered') THEN
        PERFORM dormant_admit_one(a.thread_id, NULL, a.call_id, 'tool_result', 1::smallint, 0,
                                  p_sort_key, p_result, a.call_id, a.tool, false, NULL, p_now);
    END IF;
    RETURN jsonb_build_object('fresh', true, 'row', to_jsonb(a));
END
$$;

-- Admit a batch of NewInput records as dormant_admit does, and keep each new input's
-- parts (a JSON array of references and facts) on its row, in the same transaction.
CREATE FUNCTION dormant_admit_v2(p_items jsonb, p_sort_keys double precision[], p_now double precision)
RETURNS TABLE (r_input_id bigint, r_duplicate boolean) LANGUAGE plpgsql AS $$
DECLARE
    i integer := 0;
BEGIN
    FOR r_input_id, r_duplicate IN
        SELECT a.r_input_id, a.r_duplicate FROM dormant_admit(p_items, p_sort_keys, p_now) a
    LOOP
        IF NOT r_duplicate AND jsonb_array_length(coalesce(p_items -> i -> 'parts', '[]')) > 0 THEN
            UPDATE inputs SET parts = (p_items -> i -> 'parts')::text WHERE id = r_input_id;
        END IF;
        i := i + 1;
        RETURN NEXT;
    END LOOP;
END
$$;

-- Apply a slice's CommitPlan as dormant_commit_slice_v2 does, and keep the parts of its
-- messages (user messages made from inputs with images or files) on their rows.
CREATE FUNCTION dormant_commit_slice_parts(
    p_plan jsonb, p_sort_keys double precision[], p_now double precision
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM dormant_commit_slice_v2(p_plan, p_sort_keys, p_now);
    IF p_plan @? '$.messages[*].parts[0]' THEN
        UPDATE messages m SET parts = x.parts::text
        FROM jsonb_to_recordset(p_plan -> 'messages') AS x (seq bigint, parts jsonb)
        WHERE m.thread_id = p_plan ->> 'thread_id' AND m.seq = x.seq
          AND jsonb_array_length(coalesce(x.parts, '[]')) > 0;
    END IF;
END
$$;
