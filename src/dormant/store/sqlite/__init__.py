"""The SQLite backend (``sqlite:///path``) and the in-RAM baseline (``memory://``, the
same code on a private in-memory database).

Layout: :mod:`.backend` (the :class:`~dormant.store.backend.Backend`), :mod:`.sql`
(every statement), :mod:`.connect` (connections, errors, migrations), :mod:`.writer`
(group commit), :mod:`.jobs` / :mod:`.outbox` / :mod:`.blobs` (write jobs),
:mod:`.reader` (slice reads), :mod:`.doctor` / :mod:`.judge` (``dormant doctor``),
``schema.sql`` and ``migrations/NNNN_name.sql``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ... import inbox
from ...view.cache import ViewCache
from ..core import DEFAULT_VIEW_CACHE_BYTES, DEFAULT_VIEW_SPILL_BYTES, StoreCore
from .backend import SQLiteBackend
from .connect import SCHEMA

#: The schema version this dormant writes (the newest numbered migration).
SCHEMA_VERSION = SCHEMA.version


class SQLiteStore(StoreCore):
    """The store core over a :class:`SQLiteBackend` (a file, or ``memory://``).

    ``backend_options`` go to :class:`SQLiteBackend` (``synchronous``,
    ``busy_timeout_ms``, ``writer_thread``, ``max_page_count``, ...).
    """

    backend: SQLiteBackend

    def __init__(
        self,
        url: str = "memory://",
        *,
        views: ViewCache | None = None,
        view_cache_bytes: int = DEFAULT_VIEW_CACHE_BYTES,
        view_spill_bytes: int = DEFAULT_VIEW_SPILL_BYTES,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
        clock: Callable[[], float] = time.time,
        **backend_options: Any,
    ) -> None:
        super().__init__(
            SQLiteBackend(url, clock=clock, **backend_options),
            views=views,
            view_cache_bytes=view_cache_bytes,
            view_spill_bytes=view_spill_bytes,
            max_input_bytes=max_input_bytes,
        )

    async def set_max_page_count(self, pages: int | None) -> int:
        """Cap the file's size in pages (see :meth:`SQLiteBackend.set_max_page_count`)."""
        return await self.backend.set_max_page_count(pages)


__all__ = ["SCHEMA_VERSION", "SQLiteBackend", "SQLiteStore"]
