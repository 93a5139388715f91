"""Store.release_caches: what the RSS governor calls to give back database caches."""

from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from dormant.records import NewInput
from dormant.store.postgres import PostgresStore
from dormant.store.sqlite import SQLiteStore


def cache_used(conn: apsw.Connection) -> int:
    """Bytes of ``conn``'s page cache in use now."""
    current, _ = conn.status(apsw.SQLITE_DBSTATUS_CACHE_USED)
    return int(current)


async def fill(store: SQLiteStore) -> None:
    """Write and read back enough rows that the page caches hold something."""
    for n in range(20):
        thread = f"t{n}"
        await store.create_thread(thread, "a")
        await store.admit([NewInput(thread_id=thread, kind="user", dedup_key="k", content="x" * 20_000)])
    page = await store.list_threads(limit=50)
    assert len(page.items) == 20


@pytest.mark.parametrize("writer_thread", [False, True])
async def test_a_sqlite_store_releases_the_page_caches_of_its_connections(
    tmp_path: Path, writer_thread: bool
) -> None:
    store = SQLiteStore(f"sqlite:///{tmp_path / 'db.sqlite'}", writer_thread=writer_thread)
    await store.open()
    try:
        await fill(store)
        backend = store.backend
        conns = [c for c in (backend._writer, backend._reader) if c is not None]
        before = sum(cache_used(c) for c in conns)
        assert before > 0
        assert await store.release_caches() == 2  # the writer and the reader
        after = sum(cache_used(c) for c in conns)
        assert after < before / 2, (before, after)
    finally:
        await store.close()
    assert await store.release_caches() == 0  # closed: nothing held


async def test_memory_store_releases_its_one_connection() -> None:
    store = SQLiteStore("memory://")
    await store.open()
    try:
        await fill(store)
        assert await store.release_caches() == 1
    finally:
        await store.close()


async def test_a_postgres_store_holds_no_page_cache_here(pg_url: str) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        assert await store.release_caches() == 0  # the server keeps its own caches
    finally:
        await store.close()
