"""Durable stores behind one protocol; :func:`open_store` picks one by URL.

Every store is the :class:`~dormant.store.core.StoreCore` (the domain rules, once)
over a backend that only moves rows (:mod:`dormant.store.backend`): SQLite for
``sqlite:///path`` and ``memory://`` (an in-memory SQLite database), PostgreSQL for
``postgresql://``.

May import: the view cache and builder, tools' blobs, tenants, the journal's rules,
long-term memory's records and row protocol, and the root's vocabulary; never the
slices, the runtime, the server or the CLI (they use a store).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .base import MAX_PAGE, Store
from .core import StoreCore

if TYPE_CHECKING:
    from ..config import Settings

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEMES = ("sqlite://", "memory://")


def open_store(url: str, **options: Any) -> StoreCore:
    """A store for ``url``: ``sqlite:///path/file.db``, ``postgresql://...`` or ``memory://``.

    ``options`` are those :func:`store_options` builds (or a subset). The store is
    not opened yet: ``await store.open()`` (the runtime does it). Raises
    :class:`UsageError` for an unknown scheme.
    """
    if url.startswith(SQLITE_SCHEMES):
        from .sqlite import SQLiteStore

        return SQLiteStore(url, **options)
    if url.startswith(POSTGRES_SCHEMES):
        from .postgres import PostgresStore

        return PostgresStore(url, **options)
    raise UsageError(
        f"unknown store URL {url!r}: use sqlite:///path/to/file.db, postgresql://user@host/db or memory://"
    )


def store_options(url: str, settings: Settings) -> dict[str, Any]:
    """The options of :func:`open_store` for ``url`` that come from ``settings``.

    Each backend takes its own knobs; this is the one place that knows which, so
    every caller (the runtime, the CLI) builds a store the same way.
    """
    options: dict[str, Any] = {
        "max_input_bytes": settings.max_input_bytes,
        "view_cache_bytes": settings.view_cache_bytes,
        "view_spill_bytes": settings.view_spill_bytes,
    }
    if url.startswith(SQLITE_SCHEMES):
        options["synchronous"] = settings.synchronous
    elif url.startswith(POSTGRES_SCHEMES):
        options["pool_size"] = settings.pg_pool_size
    return options


__all__ = ["MAX_PAGE", "Store", "StoreCore", "open_store", "store_options"]
