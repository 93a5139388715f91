-- schema 13 -> 14: client tools. A thread keeps the tools its client runs itself (JSON
-- function schemas, set by the newest admitted input that carried some: dormant_admit), and
-- a call to one is an outbox entry of status 'external' (dormant_commit_slice): never
-- claimed by a dispatcher, answered from outside (dormant_complete_call).
ALTER TABLE threads ADD COLUMN client_tools text;
ALTER TABLE outbox DROP CONSTRAINT outbox_status_check;
ALTER TABLE outbox ADD CONSTRAINT outbox_status_check
    CHECK (status IN ('pending', 'running', 'dead', 'unknown', 'external'));

CREATE OR REPLACE FUNCTION dormant_admit(p_items jsonb, p_sort_keys double precision[], p_now double precision)
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

CREATE OR REPLACE FUNCTION dormant_complete_call(
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
