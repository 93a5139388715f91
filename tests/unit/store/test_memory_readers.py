"""Memory's read pool on a SQLite file: bounded, closed with the store, errors translated."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import apsw
import pytest

from dormant.errors import StoreError
from dormant.store.sqlite.memory.readers import ReaderPool


def _file(tmp_path: Path) -> str:
    path = str(tmp_path / "r.db")
    conn = apsw.Connection(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x INTEGER)")
    conn.execute("INSERT INTO t VALUES (1), (2)")
    conn.close()
    return path


def test_reads_reuse_at_most_size_connections(tmp_path: Path) -> None:
    path = _file(tmp_path)
    made: list[Any] = []

    def connect() -> Any:
        conn = apsw.Connection(path)
        conn.setbusytimeout(5000)  # two first opens at once may meet the WAL index being rebuilt
        made.append(conn)
        return conn

    pool = ReaderPool(connect, size=2)
    inside = threading.Barrier(2, timeout=10)
    peak: list[int] = []
    counting = threading.Lock()  # two reads, never three, take the barrier

    def read(c: Any) -> int:
        with counting:
            first_two = len(peak) < 2
            if first_two:
                peak.append(pool.connections)
        if first_two:
            inside.wait()  # two reads hold a connection each at the same time
        return int(c.execute("SELECT sum(x) FROM t").fetchone()[0])

    results: list[int] = []
    threads = [threading.Thread(target=lambda: results.append(pool.run(read))) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert results == [3] * 6
    assert len(made) == 2 and pool.connections == 2  # never a third: the others waited
    pool.close()
    assert pool.connections == 0
    with pytest.raises(StoreError, match="not open"):
        pool.run(read)


def test_a_connection_in_use_at_close_is_closed_when_its_read_ends(tmp_path: Path) -> None:
    path = _file(tmp_path)
    conns: list[Any] = []

    def connect() -> Any:
        conns.append(apsw.Connection(path))
        return conns[-1]

    pool = ReaderPool(connect, size=1)
    started, release = threading.Event(), threading.Event()

    def slow(c: Any) -> int:
        started.set()
        release.wait(10)
        return int(c.execute("SELECT count(*) FROM t").fetchone()[0])

    out: list[int] = []
    reader = threading.Thread(target=lambda: out.append(pool.run(slow)))
    reader.start()
    assert started.wait(10)
    pool.close()
    assert pool.connections == 1  # still reading
    release.set()
    reader.join(10)
    assert out == [2] and pool.connections == 0
    with pytest.raises(apsw.ConnectionClosedError):
        conns[0].execute("SELECT 1")


def test_driver_errors_are_store_errors_and_free_the_connection(tmp_path: Path) -> None:
    path = _file(tmp_path)
    pool = ReaderPool(lambda: apsw.Connection(path), size=1)
    with pytest.raises(StoreError):
        pool.run(lambda c: c.execute("SELECT * FROM missing").fetchall())
    assert pool.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 2
    pool.close()


def test_a_full_pool_makes_a_read_wait_then_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dormant.store.sqlite.memory import readers as memory_readers

    monkeypatch.setattr(memory_readers, "WAIT_S", 0.05)
    path = _file(tmp_path)
    pool = ReaderPool(lambda: apsw.Connection(path), size=1)
    busy, release = threading.Event(), threading.Event()

    def hold(c: Any) -> bool:
        busy.set()
        return release.wait(10)

    holder = threading.Thread(target=lambda: pool.run(hold))
    holder.start()
    assert busy.wait(10)
    t = time.monotonic()
    with pytest.raises(StoreError, match="no free memory read connection"):
        pool.run(lambda c: 1)
    assert time.monotonic() - t >= 0.04
    release.set()
    holder.join(10)
    pool.close()
