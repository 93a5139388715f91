-- schema 14 -> 15: waits for a person (approvals and ask_user questions).

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
