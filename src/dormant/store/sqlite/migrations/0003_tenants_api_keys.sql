-- schema 2 -> 3: tenants of `dormant serve`, their API keys, the tenant of a thread (issue 18.4).
-- A key keeps only a random salt and sha256(salt || secret); its secret is shown once.
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL
);
CREATE TABLE api_keys (
    id         TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL REFERENCES tenants(id),
    salt       BLOB NOT NULL,
    digest     BLOB NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, id);
-- The tenant owning a thread ('' for the library's default tenant), from its id.
ALTER TABLE threads ADD COLUMN tenant TEXT GENERATED ALWAYS AS (CASE WHEN substr(id, 14, 1) = '/' AND substr(id, 1, 1) = 't' THEN substr(id, 1, 13) ELSE '' END) VIRTUAL;
CREATE INDEX threads_tenant ON threads (tenant) WHERE tenant <> '';
