"""``open_store`` picks a backend by URL; ``store_options`` is the one place options are built."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.config import Settings
from dormant.errors import UsageError
from dormant.store import StoreCore, open_store, store_options
from dormant.store.sqlite import SQLiteStore
from dormant.view.cache import ViewCache


async def test_memory_url_is_sqlite_in_memory_and_not_persistent() -> None:
    store = open_store("memory://")
    assert isinstance(store, SQLiteStore)
    assert store.path is None and not store.persistent
    assert not await store.exists()
    await store.open()
    try:
        await store.create_thread("t1", "a")
        assert (await store.get_thread("t1")).agent == "a"
    finally:
        await store.close()


async def test_two_memory_stores_share_nothing() -> None:
    a, b = open_store("memory://"), open_store("memory://")
    await a.open()
    await b.open()
    try:
        await a.create_thread("t1", "a")
        assert (await b.list_threads()).items == ()
    finally:
        await a.close()
        await b.close()


def test_sqlite_url_with_an_absolute_path(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore) and store.persistent
    assert store.path is not None
    assert Path(store.path).resolve() == (tmp_path / "x.db").resolve()


def test_sqlite_url_with_a_relative_path() -> None:
    store = open_store("sqlite:///./here.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == "./here.db"


async def test_exists_says_whether_the_file_is_there(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert not await store.exists()
    await store.open()
    await store.close()
    assert await store.exists()


@pytest.mark.parametrize("url", ["mysql://x", "", "sqlite://", "sqlite:///"])
def test_unknown_or_unavailable_urls_are_usage_errors(url: str) -> None:
    with pytest.raises(UsageError):
        open_store(url)


def test_bad_sqlite_options_are_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        open_store(f"sqlite:///{tmp_path}/x.db", synchronous="OFF")


async def test_missing_directory_is_a_usage_error(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/nope/x.db")
    with pytest.raises(UsageError, match="does not exist"):
        await store.open()


@pytest.mark.parametrize("url", ["sqlite:///x.db", "memory://", "postgresql://u@h/db"])
def test_store_options_carry_every_knob_of_the_settings(url: str) -> None:
    settings = Settings.build(
        store=url, view_cache_bytes=5 * 1024 * 1024, max_input_bytes=12345, pg_pool_size=3
    )
    options = store_options(url, settings)
    assert options["view_cache_bytes"] == 5 * 1024 * 1024
    assert options["max_input_bytes"] == 12345
    if url.startswith("postgresql"):
        assert options["pool_size"] == 3
    else:
        assert options["synchronous"] == settings.synchronous
    store = open_store(url, **options)
    assert isinstance(store, StoreCore)
    assert store.views.max_bytes == 5 * 1024 * 1024 and store.max_input_bytes == 12345


def test_a_view_cache_handed_in_is_the_one_the_store_uses() -> None:
    cache = ViewCache(1024 * 1024)
    store = open_store("memory://", views=cache)
    assert store.views is cache
