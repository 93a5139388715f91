"""Pick the memory backend of a store URL."""

from __future__ import annotations

from ..errors import UsageError
from .backend import MemoryBackend


def open_backend(url: str) -> MemoryBackend:
    """The backend of ``sqlite:///path`` (or a bare path, or ``:memory:``) or ``postgresql://...``."""
    if url.startswith(("postgresql://", "postgres://")):
        from .postgres_backend import PostgresMemoryBackend

        return PostgresMemoryBackend(url)
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///") :]
    elif "://" in url:
        raise UsageError(f"no memory backend for {url.split('://')[0]}:// (sqlite:/// or postgresql://)")
    else:
        path = url
    if not path:
        raise UsageError(f"no file in {url!r}")
    from .sqlite_backend import SQLiteMemoryBackend

    return SQLiteMemoryBackend(path)
