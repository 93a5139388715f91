"""The one view-loading driver: :func:`~dormant.view.builder.build_view` over a backend's reads.

``build_view`` is pure and its callbacks are synchronous, so it runs against what
has been read so far; when it asks for more (older messages, a parent link) the
answer is read through the backend's :class:`~dormant.store.backend.SliceReader`
and it runs again: one read per chunk or level of lineage, the same reads a
synchronous callback would make. The summary a view starts from is decided here
too (the thread's own, else the nearest ancestor's at the spawn point).

Counts made while building a view (of messages stored uncounted that the view had
to count exactly) are returned as :data:`Count` rows, so the core writes them back
and the next rebuild reads them instead of counting again.
"""

from __future__ import annotations

from ..records import Message, Summary, Thread, ViewLimits
from ..view.builder import build_view, message_bytes
from .backend import SliceReader

#: (thread_id, seq, tokens) of a message counted while building a view.
Count = tuple[str, int, int]


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
) -> tuple[tuple[Message, ...], Summary | None, int, list[Count], tuple[int, int]]:
    """The bounded view of ``thread``: its messages, its summary, how many of the
    messages are inherited from ancestors, the counts it made (of messages stored
    uncounted), and what the view weighs (:func:`~dormant.view.builder.view_usage`)."""
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
        made: dict[tuple[str, int], int] = {}
        usage: list[int] = []
        try:
            view, inherited = build_view(thread, limits, fetch, parent_of, summary, made, usage)
            counts = [(t, seq, n) for (t, seq), n in made.items()]
            return view, summary, inherited, counts, (usage[0], usage[1])
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


#: Counts waiting to be written back, at most (rows over all threads); past it the
#: oldest thread's are dropped (they are only recounted by its next rebuild).
MAX_PENDING_COUNTS = 16_384
#: Threads with counts waiting, at most.
MAX_PENDING_THREADS = 4_096


class PendingCounts:
    """Counts made by view loads, per thread, until that thread's slice commits and the
    core writes them back with it. Bounded by rows and threads (each row is three
    small values, so by bytes too); oldest thread first out."""

    __slots__ = ("_by_thread", "_rows")

    def __init__(self) -> None:
        self._by_thread: dict[str, list[Count]] = {}
        self._rows = 0

    def __len__(self) -> int:
        return self._rows

    def add(self, thread_id: str, counts: list[Count]) -> None:
        """Keep ``counts`` (made loading ``thread_id``'s view) for its commit."""
        if not counts:
            return
        self.take(thread_id)
        counts = counts[:MAX_PENDING_COUNTS]
        self._by_thread[thread_id] = counts
        self._rows += len(counts)
        while self._rows > MAX_PENDING_COUNTS or len(self._by_thread) > MAX_PENDING_THREADS:
            self.take(next(iter(self._by_thread)))

    def take(self, thread_id: str) -> list[Count]:
        """The counts waiting for ``thread_id`` (forgotten here)."""
        counts = self._by_thread.pop(thread_id, [])
        self._rows -= len(counts)
        return counts
