-- schema 7 -> 8: retention tiers (issue 17 item 2). A dedup key remembers when its input
-- was admitted, so keys past the dedup horizon can be pruned (keys from before this
-- migration count as admitted now: they are kept a whole horizon more); a journal entry
-- remembers the thread's message seq it went with (fork and rewind branch there); the
-- newest change of a key is found by index. dormant_admit_one stamps the key,
-- dormant_commit_slice the change records.
ALTER TABLE input_keys ADD COLUMN admitted_at double precision NOT NULL DEFAULT 0;
UPDATE input_keys SET admitted_at = extract(epoch FROM clock_timestamp());
CREATE INDEX input_keys_admitted ON input_keys (admitted_at);
ALTER TABLE state_journal ADD COLUMN msg_seq bigint NOT NULL DEFAULT 0;
CREATE INDEX state_journal_keys ON state_journal (thread_id, key, seq) WHERE key IS NOT NULL;

CREATE OR REPLACE FUNCTION dormant_admit_one(
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
                              source, input_id, created_at, tokens)
        SELECT v_thread, m.seq, m.role, m.content,
               CASE WHEN jsonb_array_length(m.tool_calls) > 0 THEN m.tool_calls::text END,
               m.tool_call_id, m.name, m.source, m.input_id, coalesce(nullif(m.created_at, 0), p_now),
               m.tokens
        FROM jsonb_to_recordset(p_plan -> 'messages') AS m (
            seq bigint, role text, content text, tool_calls jsonb, tool_call_id text, name text,
            source text, input_id bigint, created_at double precision, tokens integer);
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
