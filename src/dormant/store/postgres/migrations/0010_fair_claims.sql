-- schema 8 -> 9: claims fair across tenants (issue 18.4). The claim walks the tenants that
-- have ready work (a skip scan) and takes each one's best threads, so the ready index is
-- ordered by tenant first; live leases per tenant come from threads_leased.
DROP INDEX threads_ready;
CREATE INDEX threads_ready ON threads (tenant, ready_key) WHERE ready_key IS NOT NULL;

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
