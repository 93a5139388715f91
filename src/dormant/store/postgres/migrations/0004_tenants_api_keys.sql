-- schema 3 -> 4: tenants of `dormant serve`, their API keys, the tenant of a thread (issue 18.4).
-- A key keeps only a random salt and sha256(salt || secret); its secret is shown once.
CREATE TABLE tenants (
    id         text COLLATE "C" PRIMARY KEY,
    name       text COLLATE "C" NOT NULL UNIQUE,
    created_at double precision NOT NULL
);
CREATE TABLE api_keys (
    id         text COLLATE "C" PRIMARY KEY,
    tenant_id  text COLLATE "C" NOT NULL REFERENCES tenants (id),
    salt       bytea NOT NULL,
    digest     bytea NOT NULL,
    created_at double precision NOT NULL,
    revoked_at double precision
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);
-- The tenant owning a thread ('' for the library's default tenant), from its id.
ALTER TABLE threads ADD COLUMN tenant text COLLATE "C" GENERATED ALWAYS AS (CASE WHEN substr(id, 14, 1) = '/' AND left(id, 1) = 't' THEN left(id, 13) ELSE '' END) STORED;
CREATE INDEX threads_tenant ON threads (tenant) WHERE tenant <> '';
