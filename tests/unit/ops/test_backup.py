"""SQLite backups: base + page-level increments, verified before they count, restored whole."""

from __future__ import annotations

import json
from pathlib import Path

import apsw
import pytest

from dormant.errors import StoreError, UsageError
from dormant.ops import backup as bk


def make_db(path: Path, rows: int) -> None:
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA page_size=4096; PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE schema_version (version INTEGER); INSERT INTO schema_version VALUES (7)")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
    with conn:
        for i in range(rows):
            conn.execute("INSERT INTO t (body) VALUES (?)", (f"row {i} " * 40,))
    conn.close()


def write(path: Path, sql: str) -> None:
    conn = apsw.Connection(str(path))
    conn.execute(sql)
    conn.close()


def rows(path: Path) -> int:
    conn = apsw.Connection(str(path))
    try:
        row = conn.execute("SELECT COUNT(*) FROM t").fetchone()
        assert row is not None
        return int(row[0])
    finally:
        conn.close()


def test_base_then_increments_restore_each_state(tmp_path: Path) -> None:
    db, dest = tmp_path / "s.db", tmp_path / "backup"
    url = f"sqlite:///{db}"
    make_db(db, 300)
    base = bk.backup(url, dest)
    assert (base.kind, base.recoverable, base.schema_version) == ("base", True, 7)
    assert base.row_counts == {"schema_version": 1, "t": 300}
    write(db, "INSERT INTO t (body) VALUES ('one more')")
    first = bk.backup(url, dest, incremental=True)
    assert first.kind == "increment" and first.recoverable
    assert 0 < first.pages_written < base.page_count / 4  # only what changed
    write(db, "DELETE FROM t WHERE id > 100; VACUUM")  # the file shrinks
    second = bk.backup(url, dest, incremental=True)
    assert second.page_count < base.page_count

    manifest = json.loads((dest / "manifest.json").read_text())
    assert [e["kind"] for e in manifest["entries"]] == ["base", "increment", "increment"]
    assert all(e["recoverable"] for e in manifest["entries"])

    assert bk.restore(dest, f"sqlite:///{tmp_path}/newest.db").file == second.file
    assert rows(tmp_path / "newest.db") == 100
    bk.restore(dest, f"sqlite:///{tmp_path}/middle.db", at=2)
    assert rows(tmp_path / "middle.db") == 301
    bk.restore(dest, f"sqlite:///{tmp_path}/first.db", at=1)
    assert rows(tmp_path / "first.db") == 300
    _, _, _, counts = bk.describe(tmp_path / "newest.db")
    assert counts == {"schema_version": 1, "t": 100}


def test_restore_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    make_db(db, 10)
    bk.backup(f"sqlite:///{db}", tmp_path / "b")
    with pytest.raises(UsageError, match="--force"):
        bk.restore(tmp_path / "b", f"sqlite:///{db}")
    write(db, "DELETE FROM t")
    bk.restore(tmp_path / "b", f"sqlite:///{db}", force=True)
    assert rows(db) == 10


def test_a_damaged_file_is_never_restored(tmp_path: Path) -> None:
    db, dest = tmp_path / "s.db", tmp_path / "b"
    make_db(db, 50)
    bk.backup(f"sqlite:///{db}", dest)
    write(db, "UPDATE t SET body = 'changed' WHERE id = 3")
    entry = bk.backup(f"sqlite:///{db}", dest, incremental=True)
    damaged = bytearray((dest / entry.file).read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    (dest / entry.file).write_bytes(bytes(damaged))
    with pytest.raises(StoreError, match="do not match the manifest"):
        bk.restore(dest, f"sqlite:///{tmp_path}/r.db")
    assert not (tmp_path / "r.db").exists()


def test_an_entry_that_fails_verification_is_not_recoverable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, dest = tmp_path / "s.db", tmp_path / "b"
    make_db(db, 50)
    bk.backup(f"sqlite:///{db}", dest)
    write(db, "INSERT INTO t (body) VALUES ('lost in a bad increment')")

    def skip(path: Path, target: Path, entry: bk.Entry) -> None:
        return None  # a rebuild that drops the increment's pages

    with monkeypatch.context() as patch:
        patch.setattr(bk, "_apply_increment", skip)
        with pytest.raises(StoreError, match="failed verification"):
            bk.backup(f"sqlite:///{db}", dest, incremental=True)
    entries = bk.load_manifest(dest)
    assert [e.recoverable for e in entries] == [True, False]
    assert entries[1].problems
    # the next increment is taken against the last recoverable state, and restores fully
    bk.backup(f"sqlite:///{db}", dest, incremental=True)
    bk.restore(dest, f"sqlite:///{tmp_path}/r.db")
    assert rows(tmp_path / "r.db") == 51
    with pytest.raises(Exception, match="not recoverable"):
        bk.restore(dest, f"sqlite:///{tmp_path}/r2.db", at=2)


def test_only_sqlite_urls_are_backed_up_this_way(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        bk.backup("postgresql://localhost/x", tmp_path)
