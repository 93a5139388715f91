"""``open_store`` picks a backend by URL."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.errors import UsageError
from dormant.store import MemoryStore, open_store
from dormant.store.sqlite import SQLiteStore


def test_memory_url() -> None:
    assert isinstance(open_store("memory://"), MemoryStore)


def test_sqlite_url_with_an_absolute_path(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path}/x.db")
    assert isinstance(store, SQLiteStore)
    assert Path(store.path).resolve() == (tmp_path / "x.db").resolve()


def test_sqlite_url_with_a_relative_path() -> None:
    store = open_store("sqlite:///./here.db")
    assert isinstance(store, SQLiteStore)
    assert store.path == "./here.db"


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
