-- schema 6 -> 7: claims fair across tenants (issue 18.4). The claim walks the tenants that
-- have ready work and takes each one's best threads, so the ready index is ordered by
-- tenant first; it counts each tenant's live leases from an index of leased rows.
DROP INDEX threads_ready;
CREATE INDEX threads_ready ON threads (tenant, ready_key) WHERE ready_key IS NOT NULL;
CREATE INDEX threads_leased ON threads (tenant, lease_expires) WHERE lease_token IS NOT NULL;
