"""The summary rule of retention, a mixin of :class:`~dormant.store.core.StoreCore`:
which compaction summaries of a thread may go (the statement that finds and deletes
them is each backend's ``prune_summaries``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UsageError

if TYPE_CHECKING:
    from .backend import Backend


class SummaryRetention:
    """Superseded compaction summaries: deleted once nothing can read them."""

    if TYPE_CHECKING:
        backend: Backend

    async def prune_summaries(self, thread_id: str, *, keep: int, limit: int) -> int:
        """Delete up to ``limit`` of the thread's summaries, oldest first, that nothing can
        read any more; how many. A summary is read by the thread's own views (the newest:
        its ``keep`` newest always stay, ``keep`` >= 1), by a child's views (the newest
        made at or before the child's ``parent_seq``) and by a fork or rewind at a seq
        (the same lookup), so one stays while a child spawned between it and the next
        summary exists, or while its successor was made after the oldest message still
        stored. Cached views are untouched: the summaries they hold all stay."""
        if keep < 1 or limit < 1:
            raise UsageError("keep and limit must be >= 1")
        return await self.backend.retention.prune_summaries(thread_id, keep, limit)
