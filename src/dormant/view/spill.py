"""The view cache's second tier: views evicted from RAM, kept in a scratch file.

When more threads are active than their views fit in the RAM budget, a slice that
misses in RAM would rebuild its view from the store: one row per message, each
decoded and weighed again (about half a millisecond for a 64-message view). The
views the RAM tier evicts are written here instead, in the form a view is used
(messages with their counts, summary, usage), so such a miss costs a ``pread`` or
a few and one msgpack decode (about 25-50 µs for the same view).

A view is kept as a chain of at most :data:`MAX_SEGMENTS` segments: the whole view
as it was first written, then the messages each later slice appended
(:meth:`ViewSpill.extend`), and how many messages at the chain's start have since
left the view. A slice whose view is kept here (scan resistance keeps it out of
RAM) so writes the two messages it added, not its whole view again; the view is
written whole again once the chain is long or carries more than
:data:`MAX_SKIP` messages that left it.

It only accelerates, like the RAM tier:

- the file is unnamed (created unlinked in the temporary directory): it goes away
  with the process, a crash included, and no other process ever reads it;
- an entry is used only when the thread's row read in the same slice says it is
  current (same checks as in RAM: incarnation, ``last_seq``, ``summary_seq``, limits);
- the file is a ring of ``max_bytes``: new writes overwrite the oldest, and an entry
  any of whose bytes were overwritten is dropped;
- an I/O error turns the tier off (logged once); the store still serves every view.

What stays in RAM is an index entry per view, bounded by ``max_entries`` and by
``max_index_bytes`` (each entry charged :data:`INDEX_ENTRY_BYTES` plus its id and
segments); the views' bytes are in the OS page cache and on disk, not in the
process's resident set (they are read with ``pread``, never mapped).
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import OrderedDict
from typing import IO

import msgspec

from ..records import Message, Summary, ViewLimits

log = logging.getLogger("dormant.store")

#: A view larger than this share of the file is not spilled (it would evict too much).
MAX_SHARE = 8
#: The encoding buffer is kept for the next view unless it grew past this.
KEEP_BUFFER = 1024 * 1024
#: Segments a view's chain holds at most (the whole view, then appended messages).
MAX_SEGMENTS = 8
#: Messages at a chain's start that left the view, at most, before it is written whole
#: again (each is decoded for nothing on every read).
MAX_SKIP = 16
#: RAM an index entry is charged beyond its thread id, and per segment of its chain
#: (tracemalloc: ~620 bytes for an entry of one segment, ~94 more per segment).
INDEX_ENTRY_BYTES = 512
SEGMENT_BYTES = 96
#: Default RAM budget of the index.
DEFAULT_INDEX_BYTES = 8 * 1024 * 1024

_Payload = tuple[tuple[Message, ...], Summary | None]


#: What a spilled view was current for: born, last_seq, summary_seq, limits, and the
#: view's inherited count and usage (the RAM tier's entry, less the view itself).
Meta = tuple[float, int, int, ViewLimits, int, tuple[int, int]]
#: (born, last_seq, summary_seq, limits): the row a view is current at.
Current = tuple[float, int, int, ViewLimits]


class Spilled:
    """A spilled view's :data:`Meta` and where its bytes are."""

    __slots__ = ("cost", "meta", "segments", "skip")

    def __init__(self, meta: Meta, segments: tuple[tuple[int, int], ...], skip: int, cost: int) -> None:
        self.meta = meta
        # (pos, length) of each segment, oldest (the whole view) first; pos is logical:
        # it grows forever, and the file offset is pos % max_bytes
        self.segments = segments
        self.skip = skip  # messages at the chain's start no longer in the view
        self.cost = cost  # RAM the index charges for this entry

    @property
    def pos(self) -> int:
        """Where the chain's oldest segment starts (its other segments are newer)."""
        return self.segments[0][0]


class ViewSpill:
    """A ring of encoded views in an unnamed file (see the module docstring)."""

    def __init__(
        self,
        max_bytes: int,
        max_entries: int = 100_000,
        directory: str | None = None,
        max_index_bytes: int = DEFAULT_INDEX_BYTES,
    ) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.max_entries = max(0, int(max_entries))
        self.max_index_bytes = max(0, int(max_index_bytes))
        self.directory = directory
        self.hits = self.writes = self.bytes_written = 0
        self.index_bytes = 0
        self._index: OrderedDict[str, Spilled] = OrderedDict()  # oldest chain start first
        self._head = 0
        self._file: IO[bytes] | None = None
        self._broken = False
        self._encoder = msgspec.msgpack.Encoder()
        self._buffer = bytearray()  # reused by each write, so encoding allocates nothing
        self._decoder = msgspec.msgpack.Decoder(_Payload)
        self._tail_decoder = msgspec.msgpack.Decoder(tuple[Message, ...])

    def __len__(self) -> int:
        return len(self._index)

    @property
    def enabled(self) -> bool:
        """Whether views are spilled (a budget, and no I/O error so far)."""
        return self.max_bytes > 0 and self.max_entries > 0 and self.max_index_bytes > 0 and not self._broken

    def put(
        self,
        thread_id: str,
        meta: Meta,
        view: tuple[Message, ...],
        summary: Summary | None,
    ) -> None:
        """Keep ``view`` (current at ``meta``) for ``thread_id``, replacing what was kept
        for it."""
        self.discard(thread_id)
        if not self.enabled:
            return
        self._encoder.encode_into((view, summary), self._buffer)
        segment = self._write()
        if segment is None:
            return
        cost = INDEX_ENTRY_BYTES + SEGMENT_BYTES + len(thread_id)
        self._index[thread_id] = Spilled(meta, (segment,), 0, cost)
        self.index_bytes += cost
        self._drop_overwritten()

    def extend(
        self, thread_id: str, current: Current, meta: Meta, added: tuple[Message, ...], dropped: int
    ) -> bool:
        """Append ``added`` to the view kept for ``thread_id`` if it is current at
        ``current``, ``dropped`` messages having left its start; it is then current at
        ``meta``. False when it was not kept, is stale, or its chain is full (the caller
        writes the view whole with :meth:`put`)."""
        entry = self._index.get(thread_id)
        if (
            entry is None
            or not self.enabled
            or entry.meta[:4] != current
            or entry.pos < self._head - self.max_bytes
            or len(entry.segments) >= MAX_SEGMENTS
            or entry.skip + dropped > MAX_SKIP
        ):
            return False
        self._encoder.encode_into(added, self._buffer)
        segment = self._write()
        if segment is None:
            return False
        entry.meta = meta
        entry.segments += (segment,)
        entry.skip += dropped
        entry.cost += SEGMENT_BYTES
        self.index_bytes += SEGMENT_BYTES
        self._drop_overwritten()
        return thread_id in self._index

    def get(
        self, thread_id: str, born: float, last_seq: int, summary_seq: int, limits: ViewLimits
    ) -> tuple[tuple[Message, ...], Summary | None, int, tuple[int, int]] | None:
        """(view, summary, inherited, usage) of ``thread_id`` if one was kept that is
        current at the given row; None otherwise (a stale entry is dropped)."""
        entry = self._index.get(thread_id)
        if entry is None:
            return None
        if entry.meta[:4] != (born, last_seq, summary_seq, limits) or entry.pos < self._head - self.max_bytes:
            self.discard(thread_id)
            return None
        try:
            fd, size = self._fd(), self.max_bytes
            (pos, length), *tail = entry.segments
            view, summary = self._decoder.decode(os.pread(fd, length, pos % size))
            if tail:
                chain = list(view)
                for pos, length in tail:
                    chain += self._tail_decoder.decode(os.pread(fd, length, pos % size))
                view = tuple(chain[entry.skip :])
        except OSError as exc:
            self._fail(exc)
            return None
        except msgspec.DecodeError:
            self.discard(thread_id)
            return None
        self.hits += 1
        return view, summary, entry.meta[4], entry.meta[5]

    def discard(self, thread_id: str) -> None:
        """Forget what was kept for ``thread_id``."""
        entry = self._index.pop(thread_id, None)
        if entry is not None:
            self.index_bytes -= entry.cost

    def clear(self) -> None:
        """Forget everything (the file's bytes are simply overwritten later)."""
        self._index.clear()
        self.index_bytes = 0

    def close(self) -> None:
        """Close (and so delete) the file."""
        self.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _write(self) -> tuple[int, int] | None:
        """Write the encoded buffer at the ring's head; its (pos, length), or None when
        it is too large to keep or the write failed (the tier is then off)."""
        data = self._buffer
        length = len(data)
        if length > KEEP_BUFFER:
            self._buffer = bytearray()  # the next write starts small again
        if length > self.max_bytes // MAX_SHARE:
            return None
        offset = self._head % self.max_bytes
        if offset + length > self.max_bytes:  # no segment wraps: start over at the front
            self._head += self.max_bytes - offset
            offset = 0
        try:
            os.pwrite(self._fd(), data, offset)
        except OSError as exc:
            self._fail(exc)
            return None
        pos = self._head
        self._head += length
        self.writes += 1
        self.bytes_written += length
        return pos, length

    def _fd(self) -> int:
        if self._file is None:
            # kept open for the tier's life, closed by close()
            self._file = tempfile.TemporaryFile(prefix="dormant-views-", dir=self.directory)  # noqa: SIM115
        return self._file.fileno()

    def _drop_overwritten(self) -> None:
        oldest = self._head - self.max_bytes
        index = self._index
        while index:
            first = next(iter(index.values()))
            within = len(index) <= self.max_entries and self.index_bytes <= self.max_index_bytes
            if first.pos >= oldest and within:
                break
            _, dropped = index.popitem(last=False)
            self.index_bytes -= dropped.cost

    def _fail(self, exc: OSError) -> None:
        self._broken = True
        self.close()
        log.warning("view spill file failed, spilling turned off: %s", exc)
