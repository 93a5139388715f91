-- schema 11 -> 12: a dedup key keeps the fingerprint of the request that admitted it (a
-- hash of an Idempotency-Key's request body, bounded in size), so the same key sent
-- with another body is refused (DM004, idempotency_mismatch) instead of being answered
-- as a duplicate. Keys admitted before have none: any body matches them.
ALTER TABLE input_keys ADD COLUMN fingerprint text COLLATE "C";

-- Admit a batch of NewInput records, in order; sort keys come in a parallel array. An
-- item with a fingerprint stores it with its key; a duplicate whose stored fingerprint
-- differs raises DM004 (idempotency_mismatch), and the whole batch is undone.
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
            source text, agent text, fingerprint text)
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
        RETURN NEXT;
    END LOOP;
END
$$;
