"""The RAM baseline (``memory://``) holds as much as RAM does: the headline benchmark
(20,000 agents x 20 turns) writes more than 1 GiB into it, which SQLite's ``memdb``
VFS refused with "database or disk is full"."""

from __future__ import annotations

import apsw

from dormant.store.sqlite.connect import connect, memory_name

#: Just over SQLite's memdb default size limit (SQLITE_MEMDB_DEFAULT_MAXSIZE, 1 GiB).
PAST_ONE_GIB = 1_100_000_000


def ram_database() -> apsw.Connection:
    return connect(
        memory_name(),
        memory=True,
        page_size=16384,
        cache_kib=1024,
        synchronous="OFF",
        busy_timeout_ms=1000,
        max_page_count=None,
    )


def test_the_ram_baseline_is_not_capped_at_one_gib() -> None:
    conn = ram_database()
    conn.execute("CREATE TABLE t (b BLOB)")
    piece = 275_000_000  # under SQLite's 1e9-byte limit on one value
    for _ in range(PAST_ONE_GIB // piece + 1):
        conn.execute("INSERT INTO t VALUES (zeroblob(?))", (piece,))
    pages = conn.execute("PRAGMA page_count").fetchall()[0][0]
    assert isinstance(pages, int) and pages * 16384 > PAST_ONE_GIB
    conn.close()


def test_every_ram_store_is_its_own_database() -> None:
    a, b = ram_database(), ram_database()
    a.execute("CREATE TABLE only_in_a (x INTEGER)")
    assert b.execute("SELECT name FROM sqlite_master").fetchall() == []
