"""Durable stores behind one protocol; :func:`open_store` picks one by URL."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .base import MAX_PAGE, Store
from .memory import MemoryStore

if TYPE_CHECKING:
    from ..config import Settings

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def open_store(url: str, **options: Any) -> Store:
    """A store for ``url``: ``sqlite:///path/file.db``, ``postgresql://...`` or ``memory://``.

    The store is not opened yet: ``await store.open()`` (the runtime does it).
    Raises :class:`UsageError` for an unknown scheme.
    """
    if url.startswith("sqlite://"):
        from .sqlite import SQLiteStore

        return SQLiteStore(url, **options)
    if url.startswith("memory://"):
        return MemoryStore(url, **options)
    if url.startswith(POSTGRES_SCHEMES):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise UsageError(
        f"unknown store URL {url!r}: use sqlite:///path/to/file.db, postgresql://user@host/db or memory://"
    )


def store_options(url: str, settings: Settings) -> dict[str, Any]:
    """The options of :func:`open_store` for ``url`` that come from ``settings``.

    Each backend takes its own knobs; this is the one place that knows which.
    """
    options: dict[str, Any] = {"max_input_bytes": settings.max_input_bytes}
    if url.startswith("sqlite://"):
        options["synchronous"] = settings.synchronous
        options["view_cache_bytes"] = settings.view_cache_bytes
    elif url.startswith(POSTGRES_SCHEMES):
        options["view_cache_bytes"] = settings.view_cache_bytes
        options["pool_size"] = settings.pg_pool_size
    return options


__all__ = ["MAX_PAGE", "MemoryStore", "Store", "open_store", "store_options"]
