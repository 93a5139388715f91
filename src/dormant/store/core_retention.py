"""Retention's rules in the store core, a mixin of :class:`~dormant.store.core.StoreCore`:
the bounds of each pruning call, which compaction summaries of a thread may go (the
statements that find and delete rows are each backend's ``retention`` part), and that a
thread's cached views go when its history changed; a history prune records the thread's
retention mark (what a policy deleted, read where history is read)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..records import RetentionMark, TierSizes
from ..tenants import scope as tenancy

if TYPE_CHECKING:
    from ..view.cache import ViewCache
    from .backend import Backend

#: What a tool result cut by retention ends with (its head is kept before it).
RETENTION_NOTE = "\n[… older tool output cut by retention: only its head is kept]"


class RetentionRules:
    """Cut tool results, parts kept as facts and text, pruned runs (and the retention
    mark) and dedup keys, superseded summaries, tier sizes."""

    if TYPE_CHECKING:
        backend: Backend
        views: ViewCache

        @property
        def clock(self) -> Callable[[], float]: ...

    async def shrink_tool_results(self, thread_id: str, *, keep: int, head_chars: int, limit: int) -> int:
        """Cut old tool results of a thread to their head (see
        :meth:`Backend.shrink_tool_results`); how many were cut. Its cached views go."""
        if keep < 1 or head_chars < 0 or limit < 1:
            raise UsageError("keep and limit must be >= 1, head_chars >= 0")
        cut = await self.backend.retention.shrink_tool_results(
            thread_id, keep, head_chars, RETENTION_NOTE, limit
        )
        if cut:
            self.views.discard(thread_id)
        return cut

    async def demote_parts(self, thread_id: str, *, keep: int, limit: int) -> int:
        """Keep the images and files of a thread's messages older than its ``keep``
        newest parts as their facts and text only (see :meth:`Backend.demote_parts`):
        a message keeps each part's kind, media type, size, width and height, name and
        text, and loses its blob reference, so views, ``show`` and ``export`` show the
        facts and the text; a blob nothing refers to any more is collected. How many
        messages changed; their thread's cached views go."""
        if keep < 1 or limit < 1:
            raise UsageError("keep and limit must be >= 1")
        changed = await self.backend.retention.demote_parts(thread_id, keep, RETENTION_NOTE, limit)
        if changed:
            self.views.discard(thread_id)
        return changed

    async def prune_dedup_keys(self, *, before: float, limit: int) -> int:
        """Forget up to ``limit`` dedup keys admitted before ``before`` (their inputs
        consumed): a redelivery of one is admitted again; how many."""
        if limit < 1:
            raise UsageError("limit must be >= 1")
        return await self.backend.retention.prune_dedup_keys(before, limit)

    async def retention_sizes(self) -> TierSizes:
        """Bytes each retention tier takes (reads every message: for metrics and budgets, not per slice)."""
        return await self.backend.retention.tier_sizes(RETENTION_NOTE)

    async def oldest_ready_at(self) -> float | None:
        """When the oldest input a thread could consume now was admitted (None: none)."""
        return await self.backend.retention.oldest_ready_at(self.clock())

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

    async def prune_history(
        self, thread_id: str, *, keep_runs: int, keep_tool_calls: int, limit: int, policy: str = "long-run"
    ) -> int:
        """Delete the thread's oldest runs that its summary covers, keeping its
        ``keep_runs`` newest and those of its ``keep_tool_calls`` newest tool results
        (see :meth:`Backend.prune_history`), recorded in its retention mark under
        ``policy``; how many messages."""
        if min(keep_runs, keep_tool_calls, limit) < 1:
            raise UsageError("keep_runs, keep_tool_calls and limit must be >= 1")
        if not policy or len(policy) > 64:
            raise UsageError("a retention policy is named by 1 to 64 characters")
        deleted = await self.backend.retention.prune_history(
            thread_id, keep_runs, keep_tool_calls, RETENTION_NOTE, limit, policy
        )
        if deleted:
            self.views.discard(thread_id)
        return deleted

    async def retention_mark(self, thread_id: str, *, tenant: str | None = None) -> RetentionMark | None:
        """What retention deleted of the thread's history (None: nothing); ``tenant``: the
        tenant the thread must belong to (NotFound otherwise)."""
        tenancy.check([thread_id], tenant)
        return await self.backend.retention.retention_mark(thread_id)
