"""The one view-loading driver: :func:`~dormant.context.build_view` over a backend's reads.

``build_view`` is pure and its callbacks are synchronous, so it runs against what
has been read so far; when it asks for more (older messages, a parent link) the
answer is read through the backend's :class:`~dormant.store.backend.SliceReader`
and it runs again: one read per chunk or level of lineage, the same reads a
synchronous callback would make. The summary a view starts from is decided here
too (the thread's own, else the nearest ancestor's at the spawn point).
"""

from __future__ import annotations

from ..context import build_view, message_bytes
from ..records import Message, Summary, Thread, ViewLimits
from .backend import SliceReader


class ViewReads:
    """What building views read from the database (a cache hit reads nothing)."""

    __slots__ = ("bytes", "reads", "tokens")

    def __init__(self) -> None:
        self.reads = 0  # statements
        self.bytes = 0  # message bytes
        self.tokens = 0  # message tokens as stored (0: uncounted)


class _Missing(Exception):
    """build_view asked for what is not read yet: (thread, max_seq, min_seq, limit) or (thread,)."""


class _Lineage:
    """Parent links read during one load, so each is read once."""

    __slots__ = ("links", "reader")

    def __init__(self, reader: SliceReader) -> None:
        self.reader = reader
        self.links: dict[str, tuple[str, int] | None] = {}

    async def parent(self, thread_id: str) -> tuple[str, int] | None:
        if thread_id not in self.links:
            self.links[thread_id] = await self.reader.parent_link(thread_id)
        return self.links[thread_id]


async def _summary_for(reader: SliceReader, lineage: _Lineage, thread: Thread) -> Summary | None:
    """The thread's latest summary, else the one its nearest ancestor had at the spawn."""
    if thread.summary_seq:
        return await reader.summary_at(thread.id, thread.summary_seq)
    link = (thread.parent_id, thread.parent_seq) if thread.parent_id else None
    while link is not None:
        summary = await reader.summary_inherited(*link)
        if summary is not None:
            return summary
        link = await lineage.parent(link[0])
    return None


async def load_view(
    reader: SliceReader, thread: Thread, limits: ViewLimits, reads: ViewReads
) -> tuple[tuple[Message, ...], Summary | None, int]:
    """The bounded view of ``thread``: its messages, its summary and how many of the
    messages are inherited from ancestors."""
    lineage = _Lineage(reader)
    summary = await _summary_for(reader, lineage, thread)
    chunks: dict[tuple[str, int, int], tuple[int, list[Message]]] = {}

    def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        got = chunks.get((thread_id, max_seq, min_seq))
        # a shorter answer than asked for means the history ended there
        if got is None or (got[0] < limit and len(got[1]) >= got[0]):
            raise _Missing(thread_id, max_seq, min_seq, limit)
        return got[1][:limit]

    def parent_of(thread_id: str) -> tuple[str, int] | None:
        if thread_id not in lineage.links:
            raise _Missing(thread_id)
        return lineage.links[thread_id]

    while True:
        try:
            view, inherited = build_view(thread, limits, fetch, parent_of, summary)
            return view, summary, inherited
        except _Missing as missing:
            if len(missing.args) == 4:
                thread_id, max_seq, min_seq, limit = missing.args
                messages = await reader.newest_messages(thread_id, max_seq, min_seq, limit)
                chunks[(thread_id, max_seq, min_seq)] = (limit, messages)
                reads.reads += 1
                reads.bytes += sum(message_bytes(m) for m in messages)
                reads.tokens += sum(m.tokens for m in messages)
            else:
                await lineage.parent(missing.args[0])
