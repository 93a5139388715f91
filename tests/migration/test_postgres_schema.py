"""PostgreSQL schema: creation, version checks, migrations from every snapshot, races."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import psycopg
import pytest

from dormant.errors import SchemaError, UsageError
from dormant.records import NewInput
from dormant.store import postgres as pg_store
from dormant.store.postgres import SCHEMA_VERSION, PostgresStore
from dormant.store.postgres.embedded import with_schema
from dormant.store.postgres.schema import SCHEMA
from tests.pg import PgServer

from .thread_state_rows import CHANGES, STATE_AFTER, THREADS, check_subjects

PACKAGE = Path(pg_store.__file__).parent
SCHEMA_FILE = PACKAGE / "schema.sql"
SNAPSHOTS = Path(__file__).with_name("schemas") / "postgres"

SHAPE = """
SELECT 'column', c.table_name || '.' || c.column_name,
       concat_ws(' ', c.data_type, c.is_nullable, c.column_default, c.collation_name)
FROM information_schema.columns c WHERE c.table_schema = current_schema()
UNION ALL
SELECT 'index', i.indexname, replace(i.indexdef, current_schema() || '.', '')
FROM pg_indexes i WHERE i.schemaname = current_schema()
UNION ALL
SELECT 'constraint', r.conrelid::regclass::text || '.' || r.conname, pg_get_constraintdef(r.oid)
FROM pg_constraint r WHERE r.connamespace = current_schema()::regnamespace
UNION ALL
SELECT 'function', p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')',
       md5(p.prosrc) || ' ' || pg_get_function_result(p.oid)
FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace
UNION ALL
SELECT 'table option', c.relname, coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'S')
"""


def shape(url: str) -> dict[tuple[str, str], str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return {(str(k), str(n)): str(d) for k, n, d in conn.execute(SHAPE).fetchall()}


def raw(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        cursor = conn.execute(sql, params) if params else conn.execute(sql.encode())
        return cursor.fetchall() if cursor.description else []


async def opened(url: str) -> PostgresStore:
    store = PostgresStore(url, pool_size=1)
    await store.open()
    return store


async def test_a_new_schema_has_every_declared_object(pg_url: str) -> None:
    store = await opened(pg_url)
    try:
        assert (await store.status()).schema_version == SCHEMA_VERSION
    finally:
        await store.close()
    got = shape(pg_url)
    tables = {name.split(".")[0] for kind, name in got if kind == "column"}
    assert tables == {
        "schema_version",
        "threads",
        "inputs",
        "input_keys",
        "messages",
        "outbox",
        "summaries",
        "blobs",
        "blob_chunks",
        "blob_refs",
        "workers",
        "tenants",
        "api_keys",
        "memory_records",
        "memory_history",
        "memory_links",
        "memory_moves",
        "memory_identity",
        "memory_dictionary",
        "memory_meta",
        "state_journal",
        "state_parts",
        "retention_marks",
        "approvals",
    }
    functions = {name.split("(")[0] for kind, name in got if kind == "function"}
    assert {"dormant_admit", "dormant_commit_slice", "dormant_claim_outbox"} <= functions
    assert {"dormant_commit_slice_v2", "dormant_decide_approval"} <= functions
    assert raw(pg_url, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


def test_snapshots_cover_every_version() -> None:
    versions = sorted(int(p.stem[1:]) for p in SNAPSHOTS.glob("v*.sql"))
    assert versions == list(range(1, SCHEMA_VERSION + 1)), "copy the schema file to a new snapshot"
    assert [m.version for m in SCHEMA.migrations] == list(range(2, SCHEMA_VERSION + 1))
    latest = (SNAPSHOTS / f"v{SCHEMA_VERSION}.sql").read_text()
    assert latest == SCHEMA_FILE.read_text(), "the newest snapshot is the schema file"


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
async def test_every_snapshot_migrates_to_the_schema_of_a_new_database(pg: PgServer, version: int) -> None:
    old, new = pg.fresh_url("old"), pg.fresh_url("new")
    raw(old, (SNAPSHOTS / f"v{version}.sql").read_text())
    raw(old, f"INSERT INTO schema_version (version) VALUES ({version})")
    for url in (old, new):
        await (await opened(url)).close()
    assert shape(old) == shape(new)


def test_migration_files_are_numbered_and_named() -> None:
    names = sorted(p.name for p in (PACKAGE / "migrations").iterdir() if p.suffix == ".sql")
    assert names[0] == "0002_tokens_summaries_blobs.sql"
    assert names == [m.name for m in SCHEMA.migrations], "every .sql file is NNNN_name.sql"
    assert SCHEMA.snapshot == SCHEMA_FILE.read_text()


async def test_reopening_keeps_the_data(pg_url: str) -> None:
    store = await opened(pg_url)
    item = NewInput(thread_id="t1", kind="user", dedup_key="k1", content="kept", agent="a")
    (first,) = await store.admit([item])
    await store.close()
    store = await opened(pg_url)
    try:
        (again,) = await store.admit([item])
        assert again.duplicate and again.input_id == first.input_id
    finally:
        await store.close()
    assert raw(pg_url, "SELECT count(*) FROM schema_version") == [(1,)]


async def test_a_newer_schema_is_refused(pg_url: str) -> None:
    await (await opened(pg_url)).close()
    raw(pg_url, "UPDATE schema_version SET version = %s", (SCHEMA_VERSION + 1,))
    with pytest.raises(SchemaError, match="newer"):
        await opened(pg_url)


async def test_workers_opening_a_new_database_at_once_create_it_once(pg_url: str) -> None:
    stores = await asyncio.gather(*(opened(pg_url) for _ in range(4)))
    for store in stores:
        await store.close()
    assert raw(pg_url, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]


async def test_a_search_path_without_an_existing_schema_is_a_usage_error(pg: PgServer) -> None:
    with pytest.raises(UsageError, match="CREATE SCHEMA"):
        await opened(with_schema(pg.url, "no_such_schema"))


async def test_schema_11_leaves_journaled_threads_to_a_replay_and_finds_their_subject(pg: PgServer) -> None:
    """Migrating to schema 11: a thread with a state journal gets no state on its row
    (NULL: replayed), a thread without one the empty state; the subject comes from the
    newest ``_subject`` change."""
    old = pg.fresh_url("old")
    raw(old, (SNAPSHOTS / "v10.sql").read_text())
    raw(old, "INSERT INTO schema_version (version) VALUES (10)")
    for thread in THREADS:
        raw(old, "INSERT INTO threads (id, agent, created_at, updated_at) VALUES (%s, 'a', 1, 1)", (thread,))
    for change in CHANGES:
        raw(
            old,
            "INSERT INTO state_journal (thread_id, seq, kind, key, value, created_at) "
            "VALUES (%s, %s, %s, %s, %s, 1)",
            change,
        )
    await check_subjects(await opened(old))
    assert dict(raw(old, "SELECT id, state FROM threads")) == STATE_AFTER
