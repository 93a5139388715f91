"""SQLite schema: creation, version checks, migrations, reopening."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import apsw
import pytest

from dormant.errors import SchemaError, StoreError
from dormant.records import CommitPlan, Message, NewCall, NewInput, ViewLimits
from dormant.slices.step import input_message
from dormant.store.migrations import Migration, Schema
from dormant.store.sqlite import SCHEMA_VERSION, SQLiteStore
from dormant.store.sqlite import connect as sqlite_connect
from tests.helpers import all_messages

from .thread_state_rows import CHANGES, STATE_AFTER, THREADS, check_subjects

SCHEMA_FILE = Path(sqlite_connect.__file__).with_name("schema.sql")
SNAPSHOTS = Path(__file__).with_name("schemas")


def url(path: Path) -> str:
    return f"sqlite:///{path}"


def add_migrations(monkeypatch: pytest.MonkeyPatch, *extra: tuple[int, str]) -> None:
    """Ship ``extra`` (version, SQL) migrations after the real ones, for one test."""
    shipped = sqlite_connect.SCHEMA
    added = tuple(Migration(version, f"{version:04d}_test.sql", sql) for version, sql in extra)
    monkeypatch.setattr(sqlite_connect, "SCHEMA", Schema(shipped.snapshot, shipped.migrations + added))


def declared_objects(sql: str) -> set[tuple[str, str]]:
    """(kind, name) of every CREATE [VIRTUAL] TABLE / CREATE INDEX / CREATE VIEW in a schema file."""
    return {
        (kind.lower(), name)
        for kind, name in re.findall(
            r"CREATE\s+(?:UNIQUE\s+|VIRTUAL\s+)?(TABLE|INDEX|VIEW)\s+(\w+)", sql, re.IGNORECASE
        )
    }


def without_shadow_tables(
    objects: set[tuple[str, str]], declared: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """``objects`` less the shadow tables SQLite makes for a declared virtual table
    (FTS5's ``<name>_data``, ``<name>_idx``, ...)."""
    virtual = {name for kind, name in declared if name.endswith("_fts")}
    return {(kind, name) for kind, name in objects if not any(name.startswith(v + "_") for v in virtual)}


def shape(path: Path) -> dict[tuple[str, str], Any]:
    """A comparable description of a database's schema: columns, indexes, partial-index SQL."""
    conn = apsw.Connection(str(path))
    try:
        out: dict[tuple[str, str], Any] = {}
        objects = [
            (str(kind), str(name), str(table), str(sql or ""))
            for kind, name, table, sql in conn.execute(
                "SELECT type, name, tbl_name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
            ).fetchall()
        ]
        for kind, name, table, sql in objects:
            if kind == "table":
                columns = conn.execute(f"PRAGMA table_xinfo({name})").fetchall()
                indexes = []
                for _, index, unique, origin, partial in conn.execute(
                    f"PRAGMA index_list({name})"
                ).fetchall():
                    cols = tuple(r[2] for r in conn.execute(f"PRAGMA index_info({index})").fetchall())
                    indexes.append((cols, unique, origin, partial))
                without_rowid = "WITHOUT ROWID" in sql.upper()
                # column order may differ after ALTER TABLE ADD COLUMN; compare as sets
                out[(kind, name)] = (sorted(c[1:] for c in columns), sorted(indexes), without_rowid)
            elif kind == "index":
                out[(kind, name)] = (table, " ".join(sql.split()))
            else:
                out[(kind, name)] = " ".join(sql.split())
        return out
    finally:
        conn.close()


def raw(path: Path, sql: str, bindings: tuple[Any, ...] = ()) -> list[Any]:
    conn = apsw.Connection(str(path))
    try:
        return list(conn.execute(sql, bindings).fetchall())
    finally:
        conn.close()


async def fill(store: SQLiteStore) -> None:
    """Some of everything: inputs (consumed and pending), messages, an open call."""
    await store.admit([NewInput(thread_id="t1", kind="user", dedup_key="k1", content="hello", agent="a")])
    (claim,) = await store.claim_threads("w", 1, 30.0)
    load = await store.load_slice(claim, ViewLimits())
    messages = (
        input_message(load.inputs[0], 1, 0.0),
        Message(seq=2, role="assistant", content="hi"),
    )
    await store.commit_slice(
        CommitPlan(
            thread_id="t1",
            token=claim.token,
            consumed=(load.inputs[0].id,),
            messages=messages,
            calls=(NewCall(call_id="c1", tool="f", arguments="{}"),),
            awaiting=1,
        )
    )
    await store.admit([NewInput(thread_id="t2", kind="user", dedup_key="k1", content="waiting", agent="a")])


async def test_a_new_database_gets_the_current_schema(tmp_path: Path) -> None:
    db = tmp_path / "new.db"
    store = SQLiteStore(url(db))
    await store.open()
    try:
        assert (await store.status()).schema_version == SCHEMA_VERSION
    finally:
        await store.close()
    assert raw(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    created = {
        (kind, name)
        for kind, name in raw(db, "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")
    }
    declared = declared_objects(SCHEMA_FILE.read_text())
    assert without_shadow_tables(created, declared) == declared
    assert raw(db, "PRAGMA journal_mode") == [("wal",)]


async def test_a_newer_database_is_refused_and_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "future.db"
    store = SQLiteStore(url(db))
    await store.open()
    await fill(store)
    await store.close()
    conn = apsw.Connection(str(db))
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    before = shape(db)

    newer = SQLiteStore(url(db))
    with pytest.raises(SchemaError, match="upgrade") as info:
        await newer.open()
    assert f"version {SCHEMA_VERSION + 1}" in str(info.value)
    with pytest.raises(StoreError):
        await newer.get_thread("t1")  # not half-open
    await newer.close()
    assert raw(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION + 1,)]
    assert shape(db) == before


async def test_reopening_keeps_everything(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    store = SQLiteStore(url(db))
    await store.open()
    await fill(store)
    await store.close()

    again = SQLiteStore(url(db))
    await again.open()
    try:
        assert [m.content for m in await all_messages(again, "t1")] == ["hello", "hi"]
        thread = await again.get_thread("t1")
        assert (thread.last_seq, thread.awaiting) == (2, 1)
        assert [(e.call_id, e.status) for e in (await again.list_outbox()).items] == [("c1", "pending")]
        (dup,) = await again.admit([NewInput(thread_id="t1", kind="user", dedup_key="k1", content="x")])
        assert dup.duplicate, "dedup keys survive a restart"
        (claim,) = await again.claim_threads("w", 10, 30.0)
        assert claim.thread_id == "t2"
        load = await again.load_slice(claim, ViewLimits())
        assert [i.content for i in load.inputs] == ["waiting"]
        assert (await again.status()).schema_version == SCHEMA_VERSION
    finally:
        await again.close()


async def test_reopening_twice_in_one_process(tmp_path: Path) -> None:
    store = SQLiteStore(url(tmp_path / "twice.db"))
    await store.open()
    await store.open()  # idempotent
    await fill(store)
    await store.close()
    await store.close()
    await store.open()
    try:
        assert (await store.get_thread("t1")).last_seq == 2
    finally:
        await store.close()


async def test_migrations_run_in_order_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    store = SQLiteStore(url(db))
    await store.open()
    await fill(store)
    await store.close()

    add_migrations(
        monkeypatch,
        (SCHEMA_VERSION + 1, "ALTER TABLE threads ADD COLUMN note TEXT"),
        (SCHEMA_VERSION + 2, "CREATE TABLE extra (x INTEGER)"),
    )
    upgraded = SQLiteStore(url(db))
    await upgraded.open()
    try:
        assert (await upgraded.get_thread("t1")).last_seq == 2
    finally:
        await upgraded.close()
    assert raw(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION + 2,)]
    assert raw(db, "SELECT note FROM threads WHERE id = 't1'") == [(None,)]
    # opening again runs nothing twice (ADD COLUMN would fail if it did)
    again = SQLiteStore(url(db))
    await again.open()
    await again.close()


async def test_a_failing_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = tmp_path / "old.db"
    store = SQLiteStore(url(db))
    await store.open()
    await fill(store)
    await store.close()
    before = shape(db)

    add_migrations(
        monkeypatch,
        (SCHEMA_VERSION + 1, "ALTER TABLE threads ADD COLUMN note TEXT"),
        (SCHEMA_VERSION + 2, "THIS IS NOT SQL"),
    )
    broken = SQLiteStore(url(db))
    with pytest.raises(StoreError):
        await broken.open()
    assert raw(db, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert shape(db) == before


async def test_a_database_the_migrations_cannot_reach_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "old.db"
    store = SQLiteStore(url(db))
    await store.open()
    await store.close()
    add_migrations(monkeypatch, (SCHEMA_VERSION + 2, "CREATE TABLE extra (x INTEGER)"))  # none to +1
    stale = SQLiteStore(url(db))
    with pytest.raises(SchemaError):
        await stale.open()
    await stale.close()


def snapshot_versions() -> list[int]:
    return sorted(int(p.stem[1:]) for p in SNAPSHOTS.glob("v*.sql"))


def test_the_current_schema_has_a_snapshot() -> None:
    """Changing store/sqlite/schema.sql needs a numbered migration and a snapshot
    (see tests/migration/schemas/README.md)."""
    assert SCHEMA_VERSION in snapshot_versions(), f"no snapshot schemas/v{SCHEMA_VERSION}.sql"


def build(path: Path, schema_sql: str, version: int) -> None:
    conn = apsw.Connection(str(path))
    try:
        conn.execute(schema_sql)
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
    finally:
        conn.close()


@pytest.mark.parametrize("version", snapshot_versions())
async def test_every_snapshot_migrates_to_the_schema_of_a_new_database(tmp_path: Path, version: int) -> None:
    fresh = tmp_path / "fresh.db"
    store = SQLiteStore(url(fresh))
    await store.open()
    await store.close()

    old = tmp_path / f"v{version}.db"
    build(old, (SNAPSHOTS / f"v{version}.sql").read_text(), version)
    migrated = SQLiteStore(url(old))
    await migrated.open()
    await migrated.close()
    assert raw(old, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    assert shape(old) == shape(fresh), (
        f"schemas/v{version}.sql migrated is not the current schema: did store/sqlite/schema.sql change "
        "without a new SCHEMA_VERSION and migration?"
    )


async def test_a_file_that_is_not_a_database_is_a_schema_error(tmp_path: Path) -> None:
    db = tmp_path / "junk.db"
    db.write_bytes(b"this is not a database, it is a text file with some words in it" * 100)
    store = SQLiteStore(url(db))
    with pytest.raises(SchemaError):
        await store.open()
    await store.close()


async def test_schema_9_leaves_journaled_threads_to_a_replay_and_finds_their_subject(tmp_path: Path) -> None:
    """Migrating to schema 9: a thread with a state journal gets no state on its row
    (NULL: the next slice replays the journal, its commit writes the row), a thread
    without one the empty state; the subject comes from the newest ``_subject`` change."""
    db = tmp_path / "v8.db"
    build(db, (SNAPSHOTS / "v8.sql").read_text(), 8)
    conn = apsw.Connection(str(db))
    try:
        for thread in THREADS:
            conn.execute(
                "INSERT INTO threads (id, agent, created_at, updated_at) VALUES (?, 'a', 1.0, 1.0)", (thread,)
            )
        for change in CHANGES:
            conn.execute(
                "INSERT INTO state_journal (thread_id, seq, kind, key, value, created_at) "
                "VALUES (?, ?, ?, ?, ?, 1.0)",
                change,
            )
    finally:
        conn.close()
    store = SQLiteStore(url(db))
    await store.open()
    await check_subjects(store)
    assert dict(raw(db, "SELECT id, state FROM threads")) == STATE_AFTER
