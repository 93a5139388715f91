"""The view cache's second tier: views evicted from RAM, kept in a scratch file.

When more threads are active than their views fit in the RAM budget, a slice that
misses in RAM would rebuild its view from the store: one row per message, each
decoded and weighed again (about half a millisecond for a 64-message view). The
views the RAM tier evicts are written here instead, in the form a view is used
(messages with their counts, summary, usage), so such a miss costs one ``pread``
and one msgpack decode (about 50 µs for the same view).

It only accelerates, like the RAM tier:

- the file is unnamed (created unlinked in the temporary directory): it goes away
  with the process, a crash included, and no other process ever reads it;
- an entry is used only when the thread's row read in the same slice says it is
  current (same checks as in RAM: incarnation, ``last_seq``, ``summary_seq``, limits);
- the file is a ring of ``max_bytes``: new views overwrite the oldest, and an entry
  whose bytes were overwritten is dropped;
- an I/O error turns the tier off (logged once); the store still serves every view.

What stays in RAM is an index entry per view (a few hundred bytes, bounded by
``max_entries``); the views' bytes are in the OS page cache and on disk, not in the
process's resident set.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections import OrderedDict
from typing import IO

import msgspec

from .records import Message, Summary, ViewLimits

log = logging.getLogger("dormant.store")

#: A view larger than this share of the file is not spilled (it would evict too much).
MAX_SHARE = 8
#: The encoding buffer is kept for the next view unless it grew past this.
KEEP_BUFFER = 1024 * 1024

_Payload = tuple[tuple[Message, ...], Summary | None]


#: What a spilled view was current for: born, last_seq, summary_seq, limits, and the
#: view's inherited count and usage (the RAM tier's entry, less the view itself).
Meta = tuple[float, int, int, ViewLimits, int, tuple[int, int]]


class Spilled:
    """A spilled view's :data:`Meta` and where its bytes are."""

    __slots__ = ("length", "meta", "pos")

    def __init__(self, meta: Meta, pos: int, length: int) -> None:
        self.meta = meta
        self.pos = pos  # logical: grows forever; the file offset is pos % max_bytes
        self.length = length


class ViewSpill:
    """A ring of encoded views in an unnamed file (see the module docstring)."""

    def __init__(self, max_bytes: int, max_entries: int = 100_000, directory: str | None = None) -> None:
        self.max_bytes = max(0, int(max_bytes))
        self.max_entries = max(0, int(max_entries))
        self.directory = directory
        self.hits = self.writes = self.bytes_written = 0
        self._index: OrderedDict[str, Spilled] = OrderedDict()  # oldest write first
        self._head = 0
        self._file: IO[bytes] | None = None
        self._broken = False
        self._encoder = msgspec.msgpack.Encoder()
        self._buffer = bytearray()  # reused by each put, so encoding allocates nothing
        self._decoder = msgspec.msgpack.Decoder(_Payload)

    def __len__(self) -> int:
        return len(self._index)

    @property
    def enabled(self) -> bool:
        """Whether views are spilled (a budget, and no I/O error so far)."""
        return self.max_bytes > 0 and self.max_entries > 0 and not self._broken

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
        data = self._buffer
        self._encoder.encode_into((view, summary), data)
        if len(data) > KEEP_BUFFER:
            self._buffer = bytearray()  # the next view starts small again
        if len(data) > self.max_bytes // MAX_SHARE:
            return
        offset = self._head % self.max_bytes
        if offset + len(data) > self.max_bytes:  # no entry wraps: start over at the front
            self._head += self.max_bytes - offset
            offset = 0
        try:
            os.pwrite(self._fd(), data, offset)
        except OSError as exc:
            self._fail(exc)
            return
        self._index[thread_id] = Spilled(meta, self._head, len(data))
        self._head += len(data)
        self.writes += 1
        self.bytes_written += len(data)
        self._drop_overwritten()

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
            data = os.pread(self._fd(), entry.length, entry.pos % self.max_bytes)
            view, summary = self._decoder.decode(data)
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
        self._index.pop(thread_id, None)

    def clear(self) -> None:
        """Forget everything (the file's bytes are simply overwritten later)."""
        self._index.clear()

    def close(self) -> None:
        """Close (and so delete) the file."""
        self._index.clear()
        if self._file is not None:
            self._file.close()
            self._file = None

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
            if first.pos >= oldest and len(index) <= self.max_entries:
                break
            index.popitem(last=False)

    def _fail(self, exc: OSError) -> None:
        self._broken = True
        self.close()
        log.warning("view spill file failed, spilling turned off: %s", exc)
