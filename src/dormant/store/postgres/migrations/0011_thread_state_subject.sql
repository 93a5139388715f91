-- schema 10 -> 11: the thread row carries its journal state and subject (issue 16). A
-- slice reads its registers with its load instead of replaying the journal; a subject's
-- other threads are found by an index (state-change fan-out). Threads that have journal
-- rows start with NULL (unknown: replayed) until their next commit writes the state; their
-- subject is the newest `_subject` change record, when the journal still holds one.
ALTER TABLE threads ADD COLUMN state text DEFAULT '{}';
ALTER TABLE threads ADD COLUMN subject text COLLATE "C";
UPDATE threads SET state = NULL WHERE id IN (SELECT thread_id FROM state_journal);
UPDATE threads t SET subject = (
    SELECT j.value::jsonb #>> '{}' FROM state_journal j
    WHERE j.thread_id = t.id AND j.key = '_subject' AND j.kind IN ('add', 'update')
    ORDER BY j.seq DESC LIMIT 1)
WHERE t.id IN (SELECT thread_id FROM state_journal WHERE key = '_subject');
CREATE INDEX threads_subject ON threads (subject, tenant) WHERE subject IS NOT NULL;

-- Apply a slice's CommitPlan and release the lease, or raise and change nothing.
-- p_sort_keys: one per admission of the plan.
CREATE OR REPLACE FUNCTION dormant_commit_slice(
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
        INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at,
                            created_at)
        SELECT v_thread, v_agent, c.call_id, c.tool, c.arguments, c.idempotent, p_now, p_now
        FROM jsonb_to_recordset(p_plan -> 'calls')
             AS c (call_id text, tool text, arguments text, idempotent boolean);
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
