-- schema 15 -> 16: content parts. An input and a message keep their images and files as
-- JSON references to content-addressed blobs plus their facts (media type, size, width,
-- height, name, text); NULL: none. The bytes are blobs (blobs, blob_chunks, blob_refs).
ALTER TABLE inputs ADD COLUMN parts text;
ALTER TABLE messages ADD COLUMN parts text;

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
