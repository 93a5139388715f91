"""The PostgreSQL backend (:mod:`.backend`) under the store core: statements in
:mod:`.sql`, the schema in ``schema.sql`` with numbered ``migrations/``, the
group-committing :mod:`.writer`, reads in :mod:`.reads`, blobs in :mod:`.blobs`."""

from __future__ import annotations

from typing import Any

from ... import inbox
from ...view.cache import ViewCache
from ..core import DEFAULT_VIEW_CACHE_BYTES, DEFAULT_VIEW_SPILL_BYTES, StoreCore
from .backend import PostgresBackend
from .schema import SCHEMA_VERSION


class PostgresStore(StoreCore):
    """The store core over a :class:`PostgresBackend`; backend options (``pool_size``,
    ``clock``, batch and timeout bounds, ``listen``) pass through to it."""

    backend: PostgresBackend

    def __init__(
        self,
        url: str,
        *,
        views: ViewCache | None = None,
        view_cache_bytes: int = DEFAULT_VIEW_CACHE_BYTES,
        view_spill_bytes: int = DEFAULT_VIEW_SPILL_BYTES,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
        **options: Any,
    ) -> None:
        super().__init__(
            PostgresBackend(url, **options),
            views=views,
            view_cache_bytes=view_cache_bytes,
            view_spill_bytes=view_spill_bytes,
            max_input_bytes=max_input_bytes,
        )

    @property
    def pool_size(self) -> int:
        """Read connections of this process."""
        return self.backend.pool_size

    async def sweep_blobs(self) -> int:
        """Remove the chunks of blob writes that never finished, over an hour ago."""
        return await self.backend.blobs.sweep_blobs()


__all__ = ["SCHEMA_VERSION", "PostgresBackend", "PostgresStore"]
