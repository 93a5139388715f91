-- schema 2 -> 3: worker heartbeats (issue 12.7). Leases of a worker that stopped
-- heartbeating are free at once; dormant_claim_outbox takes the dead-after threshold.
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

DROP FUNCTION dormant_claim_outbox(text, integer, text, double precision, double precision,
                                  double precision, text);

-- Reconcile running entries whose lease expired or whose worker stopped heartbeating
-- more than p_dead seconds ago by the database clock (idempotent: pending again;
-- others: 'unknown' with p_unknown admitted as their error result), then lease due
-- entries. Locks are skipped, not waited for: another worker may be doing the same.
CREATE FUNCTION dormant_claim_outbox(
    p_worker text, p_limit integer, p_token text, p_now double precision,
    p_expires double precision, p_result_key double precision, p_unknown text,
    p_dead double precision
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
        ORDER BY o.available_at, o.id LIMIT p_limit
        FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE outbox o SET status = 'running', attempts = o.attempts + 1, lease_token = p_token,
        lease_owner = p_worker, lease_expires = p_expires
    FROM picked WHERE o.id = picked.id
    RETURNING o.*;
END
$$;
