"""The view cache: recent views in RAM under a hard byte and entry budget.

The next slice of a thread extends the view it already has instead of reading it
again. It only accelerates: an entry is used only when the thread's ``created_at``
(its incarnation), ``last_seq`` and ``summary_seq``, read from the store in the same
slice, say it is current.

One cache is created per runtime (from ``Settings.view_cache_bytes``) and handed
to its store, so the RSS governor can read its size and tell it to shrink
(:meth:`ViewCache.shrink`); nothing in it is ever true only in memory.

Views evicted from RAM go to a second tier on disk (:mod:`dormant.view.spill`, from
``Settings.view_spill_bytes``), so a thread that comes back after its view left RAM
decodes it instead of rebuilding it from the store's rows.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import msgspec

from ..records import Message, Summary, Thread, ViewLimits
from .builder import MESSAGE_OVERHEAD, _extend, summary_bytes, view_usage
from .spill import Meta, ViewSpill


class CacheStats(msgspec.Struct, frozen=True, kw_only=True):
    """What a :class:`ViewCache` holds and how it has served."""

    entries: int
    bytes: int
    max_entries: int
    max_bytes: int
    hits: int
    misses: int
    ghost_bytes: int
    #: misses served by the spill file (counted in ``misses`` too), and what it holds
    spill_hits: int = 0
    spill_entries: int = 0
    spill_bytes_written: int = 0


class _Entry:
    __slots__ = ("born", "cost", "inherited", "last_seq", "limits", "summary", "summary_seq", "usage", "view")

    def __init__(
        self,
        born: float,
        last_seq: int,
        summary_seq: int,
        limits: ViewLimits,
        view: tuple[Message, ...],
        summary: Summary | None,
        inherited: int,
        usage: tuple[int, int],
    ) -> None:
        # the thread's created_at: a thread deleted and created again under the same id
        # is another incarnation, whose history this view is not
        self.born = born
        self.last_seq = last_seq
        self.summary_seq = summary_seq
        self.limits = limits
        self.view = view
        self.summary = summary
        self.inherited = inherited
        self.usage = usage
        # RAM the entry is charged: its text plus a per-message overhead
        self.cost = usage[1] + summary_bytes(summary) + MESSAGE_OVERHEAD * (len(view) + 1)


def _meta(entry: _Entry) -> Meta:
    """What the spill file keeps of ``entry`` beside its view."""
    return entry.born, entry.last_seq, entry.summary_seq, entry.limits, entry.inherited, entry.usage


#: While the cache is full, one refused re-admission in this many is let in anyway,
#: so the resident set still turns over (see :meth:`ViewCache.put`).
ADMIT_EVERY = 16
#: Views lent to running slices (see ViewCache._lend), at most, and their bytes at most
#: 1/LENT_SHARE of the cache's budget.
MAX_LENT = 1024
LENT_SHARE = 2
#: RAM an evicted thread's id costs in the cache's memory of evictions, beyond its text.
GHOST_OVERHEAD = 100
#: That memory takes at most 1/GHOST_SHARE of the cache's byte budget.
GHOST_SHARE = 16
#: The spill file's index (RAM, one entry per spilled view) takes at most 1/SPILL_INDEX_SHARE
#: of the byte budget (at least 256 KiB): ~1,270 views at the 24 MiB default.
SPILL_INDEX_SHARE = 32


class ViewCache:
    """Per-thread views, least recently used first out, capped by bytes and entries.

    Scan-resistant: when more threads are active than their views fit (slices visit
    them in turn, so plain LRU would evict each view just before it is needed and
    never hit), a thread whose view was evicted recently is not let back in while the
    cache is full, except one time in :data:`ADMIT_EVERY`. The resident views keep
    hitting; a thread never seen before, or not for a while, is always let in.
    """

    def __init__(self, max_bytes: int, max_entries: int = 100_000, spill_bytes: int = 0) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.refused = 0
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        # ids of threads whose views were evicted, oldest first, and the RAM they are
        # charged; bounded by entries and bytes (see _evicted)
        self._ghosts: OrderedDict[str, None] = OrderedDict()
        self.ghost_bytes = 0
        #: the second tier: views evicted from RAM, on disk (off when ``spill_bytes`` is 0)
        index_bytes = max(1 << 18, max_bytes // SPILL_INDEX_SHARE)
        self.spill = ViewSpill(spill_bytes, max_entries, max_index_bytes=index_bytes)
        # views scan resistance kept out of RAM, lent to the slices running on them
        self._lent: OrderedDict[str, _Entry] = OrderedDict()
        self.lent_bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(
        self, thread: Thread, limits: ViewLimits
    ) -> tuple[tuple[Message, ...], Summary | None, int] | None:
        """The cached (view, summary, inherited) of ``thread`` if current at its row."""
        found = self.lookup(thread, limits)
        return None if found is None else found[:3]

    def lookup(
        self, thread: Thread, limits: ViewLimits
    ) -> tuple[tuple[Message, ...], Summary | None, int, tuple[int, int]] | None:
        """:meth:`get`, plus the view's :func:`~dormant.view.builder.view_usage`. A view not in
        RAM may be found in the spill file; it then comes back as :meth:`put` would let it."""
        entry = self._entries.get(thread.id)
        if (
            entry is not None
            and entry.born == thread.created_at
            and entry.last_seq == thread.last_seq
            and entry.summary_seq == thread.summary_seq
            and entry.limits == limits
        ):
            self._entries.move_to_end(thread.id)
            self.hits += 1
            return entry.view, entry.summary, entry.inherited, entry.usage
        self.misses += 1
        if entry is not None or not self.spill.enabled:
            return None
        found = self.spill.get(thread.id, thread.created_at, thread.last_seq, thread.summary_seq, limits)
        if found is not None:
            view, summary, inherited, usage = found
            born, seq, summary_seq = thread.created_at, thread.last_seq, thread.summary_seq
            self._keep(thread.id, _Entry(born, seq, summary_seq, limits, view, summary, inherited, usage))
        return found

    def put(
        self,
        thread: Thread,
        limits: ViewLimits,
        view: tuple[Message, ...],
        summary: Summary | None = None,
        inherited: int = 0,
        usage: tuple[int, int] | None = None,
    ) -> None:
        """Remember ``view`` as the view of ``thread`` at its row's ``last_seq``; unless
        the cache is full and this thread's view was evicted recently (scan resistance).
        ``usage`` is the view's :func:`~dormant.view.builder.view_usage` if known."""
        entry = _Entry(
            thread.created_at,
            thread.last_seq,
            thread.summary_seq,
            limits,
            view,
            summary,
            inherited,
            usage if usage is not None else view_usage(view, limits.counts_tokens),
        )
        self._keep(thread.id, entry)

    def _keep(self, thread_id: str, entry: _Entry) -> None:
        """Store ``entry`` in RAM, unless scan resistance refuses it: then, with spilling
        on, it is lent to the running slice, whose commit writes it to the spill file."""
        if thread_id in self._ghosts and thread_id not in self._entries and self._full(entry.cost):
            self._ghosts.move_to_end(thread_id)
            self.refused += 1
            if self.refused % ADMIT_EVERY:
                self._lend(thread_id, entry)
                return
        self._store(thread_id, entry)

    def _lend(self, thread_id: str, entry: _Entry) -> None:
        """Remember a refused view until its slice commits (:meth:`advance`). The running
        slice holds the same view, so this costs no RAM of its own while it runs; bounded
        by entries and bytes, oldest first out, for slices that never commit."""
        self._drop_lent(thread_id)
        if not self.spill.enabled:
            return
        self._lent[thread_id] = entry
        self.lent_bytes += entry.cost
        while self._lent and (len(self._lent) > MAX_LENT or self.lent_bytes > self.max_bytes // LENT_SHARE):
            _, dropped = self._lent.popitem(last=False)
            self.lent_bytes -= dropped.cost

    def _drop_lent(self, thread_id: str) -> _Entry | None:
        entry = self._lent.pop(thread_id, None)
        if entry is not None:
            self.lent_bytes -= entry.cost
        return entry

    def _full(self, cost: int) -> bool:
        return self.bytes + cost > self.max_bytes or len(self._entries) >= self.max_entries

    def _store(self, thread_id: str, entry: _Entry) -> None:
        self.discard(thread_id)
        if entry.cost > self.max_bytes or self.max_entries <= 0:
            return
        self._forget_ghost(thread_id)
        self._entries[thread_id] = entry
        self.bytes += entry.cost
        while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
            evicted, old = self._entries.popitem(last=False)
            self.bytes -= old.cost
            self._evicted(evicted, old)

    def _evicted(self, thread_id: str, entry: _Entry) -> None:
        """Spill an evicted view, and remember the thread: about as many as the cache
        holds, twice over, in at most 1/GHOST_SHARE of its byte budget."""
        self._spill_out(thread_id, entry)
        self._forget_ghost(thread_id)
        self._ghosts[thread_id] = None
        self.ghost_bytes += len(thread_id) + GHOST_OVERHEAD
        self._trim_ghosts()

    def _spill_out(self, thread_id: str, entry: _Entry) -> None:
        if self.spill.enabled:
            self.spill.put(thread_id, _meta(entry), entry.view, entry.summary)

    def _trim_ghosts(self) -> None:
        most, budget = 2 * len(self._entries) + 64, self.max_bytes // GHOST_SHARE
        while self._ghosts and (len(self._ghosts) > most or self.ghost_bytes > budget):
            oldest, _ = self._ghosts.popitem(last=False)
            self.ghost_bytes -= len(oldest) + GHOST_OVERHEAD

    def _forget_ghost(self, thread_id: str) -> None:
        if self._ghosts.pop(thread_id, False) is None:
            self.ghost_bytes -= len(thread_id) + GHOST_OVERHEAD

    def advance(self, thread_id: str, messages: Sequence[Message], *, summarized: bool = False) -> None:
        """A slice committed ``messages``: extend the cached view, or drop it if stale.

        A slice that wrote a summary (``summarized``) changes the view's start: dropped.
        A view lent to the slice (kept out of RAM) goes, extended, to the spill file.
        """
        entry = self._entries.get(thread_id)
        lent = entry is None and (entry := self._drop_lent(thread_id)) is not None
        if entry is None or not messages:
            return
        if summarized or messages[0].seq != entry.last_seq + 1:
            self.discard(thread_id)
            return
        view, usage, exact = _extend(entry.view, messages, entry.limits, entry.summary, entry.usage)
        if not exact:  # images or files changed how they are shown: built afresh next time
            self.discard(thread_id)
            return
        inherited = max(0, entry.inherited - (len(entry.view) + len(messages) - len(view)))
        extended = _Entry(
            entry.born,
            messages[-1].seq,
            entry.summary_seq,
            entry.limits,
            view,
            entry.summary,
            inherited,
            usage,
        )
        if not lent:
            self._store(thread_id, extended)
            return
        # kept out of RAM: its spilled chain takes the new messages (as the view shows
        # them) if what stays of the old view is unchanged (extending may have counted
        # its messages' tokens: then the chain's copies are stale), else it is written whole
        dropped = len(entry.view) + len(messages) - len(view)
        kept = len(entry.view) - dropped
        current = (entry.born, entry.last_seq, entry.summary_seq, entry.limits)
        if not (
            0 <= kept <= len(view)
            and view[:kept] == entry.view[dropped:]  # identical objects: no field is compared
            and self.spill.extend(thread_id, current, _meta(extended), view[kept:], dropped)
        ):
            self._spill_out(thread_id, extended)

    def discard(self, thread_id: str) -> None:
        """Forget ``thread_id``'s view."""
        entry = self._entries.pop(thread_id, None)
        if entry is not None:
            self.bytes -= entry.cost
        self._drop_lent(thread_id)
        self.spill.discard(thread_id)

    def clear(self) -> None:
        """Forget everything."""
        self.spill.clear()
        self._lent.clear()
        self.lent_bytes = 0
        self._entries.clear()
        self._ghosts.clear()
        self.bytes = self.ghost_bytes = 0

    def stats(self) -> CacheStats:
        """Entries, bytes, budgets and hit counts, for metrics and the governor."""
        return CacheStats(
            entries=len(self._entries),
            bytes=self.bytes,
            max_entries=self.max_entries,
            max_bytes=self.max_bytes,
            hits=self.hits,
            misses=self.misses,
            ghost_bytes=self.ghost_bytes,
            spill_hits=self.spill.hits,
            spill_entries=len(self.spill),
            spill_bytes_written=self.spill.bytes_written,
        )

    def close(self) -> None:
        """Forget everything and delete the spill file."""
        self.clear()
        self.spill.close()

    def shrink(self, to_bytes: int) -> int:
        """Evict least recently used views until at most ``to_bytes`` are held; returns
        the bytes freed. The budget itself is unchanged (see :meth:`resize`)."""
        before = self.bytes
        while self._entries and self.bytes > max(0, to_bytes):
            evicted, old = self._entries.popitem(last=False)
            self.bytes -= old.cost
            self._evicted(evicted, old)
        return before - self.bytes

    def resize(self, max_bytes: int) -> None:
        """Change the byte budget (the governor lowers it under pressure and restores it
        after); evicts at once down to the new budget."""
        self.max_bytes = max(0, int(max_bytes))
        self.shrink(self.max_bytes)
        self._trim_ghosts()
