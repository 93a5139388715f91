-- schema 5 -> 6: claims fair across tenants (issue 18.4). The claim walks the tenants that
-- have ready work (a skip scan) and takes each one's best threads, so the ready index is
-- ordered by tenant first; live leases per tenant come from threads_leased.
DROP INDEX threads_ready;
CREATE INDEX threads_ready ON threads (tenant, ready_key) WHERE ready_key IS NOT NULL;
