"""Durable stores behind one protocol; :func:`open_store` picks one by URL."""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from .base import MAX_PAGE, Store
from .memory import MemoryStore


def open_store(url: str, **options: Any) -> Store:
    """A store for ``url``: ``sqlite:///path/file.db`` or ``memory://``.

    The store is not opened yet: ``await store.open()`` (the runtime does it).
    Raises :class:`UsageError` for an unknown scheme.
    """
    if url.startswith("sqlite://"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url, **options)
    if url.startswith("memory://"):
        return MemoryStore(url, **options)
    if url.startswith(("postgresql://", "postgres://")):
        raise UsageError("the PostgreSQL backend is not available in this version")
    raise UsageError(f"unknown store URL {url!r}: use sqlite:///path/to/file.db or memory://")


__all__ = ["MAX_PAGE", "MemoryStore", "Store", "open_store"]
