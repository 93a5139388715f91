"""Blobs: large tool outputs, stored once by content and shown to the model as an excerpt.

A tool output whose UTF-8 size passes a threshold (``Settings.blob_threshold_bytes``,
16 KiB by default) is streamed into the store (:meth:`Store.put_blob`): cut into
fixed chunks, hashed as it goes, written in bounded batches, keyed by its SHA-256
(``sha256:<hex>``), so the same bytes are stored once however often they are
produced. The message recorded instead holds the reference, the byte count and a
head/tail excerpt (:func:`excerpt`); the built-in ``read_blob`` tool pages through the
rest. Nothing here joins an output: RAM is bounded by one write batch
(:data:`BATCH_BYTES`) plus the excerpt, whatever the output's size.

A thread reads the blobs it or one of its ancestors refers to (children inherit
history by reference); blobs go with their threads (:meth:`Store.delete_thread`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
from collections.abc import (
    AsyncGenerator,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
)
from typing import Protocol, TypeAlias

from ..errors import UsageError
from ..records import BlobRef
from ..text import clean

#: Tool outputs larger than this many UTF-8 bytes are stored as blobs (the default).
DEFAULT_THRESHOLD = 16 * 1024
#: Bytes of the head, and of the tail, an excerpt shows.
EXCERPT_BYTES = 2048
#: Size of the stored chunks (the last one of a blob may be shorter).
CHUNK_BYTES = 256 * 1024
#: Bytes of chunks one write job carries: what put_blob holds in RAM at a time.
BATCH_BYTES = 2 * 1024 * 1024
#: The most one :meth:`Store.read_blob` call returns.
MAX_READ = 1024 * 1024
#: Chunks of a write that never finished (``tmp:`` refs) are removed after this long.
TMP_TTL_S = 3600.0
TMP_PREFIX = "tmp:"

#: Pieces of bytes of any size, in order: what :meth:`Store.put_blob` stores.
Pieces: TypeAlias = AsyncIterable[bytes] | Iterable[bytes]
#: What a tool may return for its result: text, bytes, or a stream of bytes (async or not).
#: Streams are consumed piece by piece and never joined; ``str`` pieces are UTF-8 encoded.
ToolOutput: TypeAlias = str | bytes | AsyncIterable[bytes] | Iterable[bytes]


class BlobWriter(Protocol):
    """What :func:`stash` needs of a store."""

    async def put_blob(self, thread_id: str, chunks: Pieces) -> BlobRef:
        """Store ``chunks`` as one blob referred to by ``thread_id``."""
        ...


class BlobReader(Protocol):
    """What the ``read_blob`` tool needs of a store (see :class:`~dormant.tools.spec.ToolContext`)."""

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` as ``thread_id`` may see it; NotFound otherwise."""
        ...

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """Bytes ``offset .. offset + length`` of the blob ``ref``."""
        ...


# -- the store side: refs, ranges, chunking --------------------------------------------


def tmp_ref(now: float) -> str:
    """The ref a blob is written under until its hash is known: ``tmp:<unix time>:<random>``.

    The time is zero-padded so that refs sort by age (see :func:`tmp_cutoff`).
    """
    return f"{TMP_PREFIX}{int(now):012d}:{secrets.token_hex(8)}"


def tmp_cutoff(now: float) -> str:
    """Refs ``>= "tmp:"`` and ``<`` this one were started more than :data:`TMP_TTL_S` ago."""
    return f"{TMP_PREFIX}{max(0, int(now - TMP_TTL_S)):012d}"


def read_length(offset: int, length: int) -> int:
    """How many bytes a read of ``length`` at ``offset`` returns at most.

    Raises UsageError for a negative offset or length; caps the length at :data:`MAX_READ`.
    """
    if offset < 0 or length < 0:
        raise UsageError(f"a blob read needs a non-negative offset and length, not {offset}, {length}")
    return min(length, MAX_READ)


def chunk_span(offset: int, length: int, size: int, chunk_bytes: int) -> range:
    """Indexes of the chunks holding bytes ``offset .. offset + length`` of a ``size``-byte blob."""
    end = min(size, offset + length)
    if end <= offset:
        return range(0)
    return range(offset // chunk_bytes, (end - 1) // chunk_bytes + 1)


async def _each(pieces: Pieces) -> AsyncIterator[bytes]:
    if isinstance(pieces, AsyncIterable):
        async for piece in pieces:
            yield piece
    else:
        for piece in pieces:
            yield piece


def _as_bytes(piece: object) -> bytes | bytearray | memoryview:
    if isinstance(piece, bytes | bytearray | memoryview):
        return piece
    if isinstance(piece, str):
        return piece.encode()
    raise TypeError(f"a blob is made of bytes; got a piece of type {type(piece).__name__}")


class Chunker:
    """Cuts pieces of any size into :data:`CHUNK_BYTES` chunks, hashing and counting them.

    :meth:`batches` yields ``[(index, chunk), ...]`` lists of at most ``batch_bytes``;
    once it is exhausted, :attr:`blob` is the blob's ref and size.
    """

    def __init__(self, chunk_bytes: int = CHUNK_BYTES, batch_bytes: int = BATCH_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.batch_chunks = max(1, batch_bytes // chunk_bytes)
        self.size = 0
        self.chunks = 0
        self._hash = hashlib.sha256()

    @property
    def blob(self) -> BlobRef:
        """The ref (``sha256:<hex>``) and size of what was cut so far."""
        return BlobRef(ref=f"sha256:{self._hash.hexdigest()}", size=self.size)

    async def batches(self, pieces: Pieces) -> AsyncGenerator[list[tuple[int, bytes]], None]:
        """The chunks of ``pieces``, in batches, in order."""
        size = self.chunk_bytes
        partial = bytearray()
        batch: list[tuple[int, bytes]] = []
        async for raw in _each(pieces):
            view = memoryview(_as_bytes(raw)).cast("B")
            self._hash.update(view)
            self.size += len(view)
            pos = 0
            while pos < len(view):
                if not partial and len(view) - pos >= size:
                    chunk = bytes(view[pos : pos + size])
                    pos += size
                else:
                    take = min(size - len(partial), len(view) - pos)
                    partial += view[pos : pos + take]
                    pos += take
                    if len(partial) < size:
                        continue
                    chunk = bytes(partial)
                    partial.clear()
                batch.append((self.chunks, chunk))
                self.chunks += 1
                if len(batch) >= self.batch_chunks:
                    yield batch
                    batch = []
        if partial:
            batch.append((self.chunks, bytes(partial)))
            self.chunks += 1
        if batch:
            yield batch


async def spool(
    pieces: Pieces, write: Callable[[list[tuple[int, bytes]]], Awaitable[None]]
) -> tuple[BlobRef, int]:
    """Cut ``pieces`` into chunks and hand them to ``write`` in batches of at most
    :data:`BATCH_BYTES`, one batch in RAM at a time; the blob's ref and size, and how
    many chunks it has. A store's ``put_blob`` writes the batches under a ``tmp:`` ref
    and then moves them to the blob's ref."""
    chunker = Chunker()
    async with contextlib.aclosing(chunker.batches(pieces)) as batches:
        async for batch in batches:
            await write(batch)
            batch.clear()  # written: let the chunks go before the next batch is cut
    return chunker.blob, chunker.chunks


# -- what the model sees -----------------------------------------------------------------


def _lead_length(byte: int) -> int:
    """Length of the UTF-8 sequence ``byte`` starts (0 for a continuation byte)."""
    if byte < 0x80:
        return 1
    if byte < 0xC0:
        return 0
    return 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4


def whole_chars(data: bytes, *, start: bool = True, end: bool = True) -> tuple[int, int]:
    """``(skip, keep)``: ``data[skip:keep]`` starts and ends on UTF-8 character boundaries.

    At most 3 bytes go at each end (the pieces of a character cut by the range);
    data that is not UTF-8 is left as it is, and so is data that would vanish.
    """
    skip, keep = 0, len(data)
    if start:
        while skip < min(3, keep) and _lead_length(data[skip]) == 0:
            skip += 1
    if end:
        for back in range(1, min(4, keep - skip) + 1):
            need = _lead_length(data[keep - back])
            if need == 0:
                continue
            if need > back:
                keep -= back
            break
    if keep <= skip:
        return 0, len(data)
    return skip, keep


#: The first line of an excerpt starts with this, then the blob's ref (retention finds it there).
BLOB_LINE = "[tool output stored as blob "
#: Characters of a ref: ``sha256:`` and 64 hex digits.
REF_CHARS = 71


def excerpt(ref: BlobRef, head: bytes, tail: bytes) -> str:
    """The message text standing for a stored blob: a first line naming it, then ``head``,
    a marker of how many bytes were cut, and ``tail``.

    ``head`` is the blob's first bytes and ``tail`` its last ones (not overlapping);
    both are trimmed to whole UTF-8 characters and decoded (invalid bytes replaced).
    """
    head = head[: whole_chars(head, start=False)[1]]
    skip, keep = whole_chars(tail, end=False)
    tail = tail[skip:keep]
    cut = ref.size - len(head) - len(tail)
    shown = (
        f"showing the first {len(head):,} and last {len(tail):,} bytes"
        if tail
        else f"showing the first {len(head):,} bytes"
    )
    lines = [
        f"{BLOB_LINE}{ref.ref} — {ref.size:,} bytes; {shown}; "
        f"read any part with read_blob(ref, offset, length)]",
        head.decode("utf-8", errors="replace"),
    ]
    if cut > 0:
        lines.append(f"[… {cut:,} bytes cut …]")
    if tail:
        lines.append(tail.decode("utf-8", errors="replace"))
    return "\n".join(lines)


class _Ends:
    """The first and the last :data:`EXCERPT_BYTES` of a stream, seen piece by piece."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.tail = b""
        self.size = 0

    def see(self, piece: bytes | bytearray | memoryview) -> None:
        view = memoryview(piece).cast("B")
        if len(self.head) < EXCERPT_BYTES:
            self.head += view[: EXCERPT_BYTES - len(self.head)]
        self.tail = (self.tail + bytes(view[-EXCERPT_BYTES:]))[-EXCERPT_BYTES:]
        self.size += len(view)

    def ends(self) -> tuple[bytes, bytes]:
        """(head, tail), the tail shortened so that the two do not overlap."""
        after_head = self.size - len(self.head)
        tail = self.tail[len(self.tail) - min(len(self.tail), after_head) :] if after_head > 0 else b""
        return bytes(self.head), tail


async def _tapped(pieces: AsyncIterator[bytes], ends: _Ends) -> AsyncIterator[bytes]:
    async for raw in pieces:
        piece = _as_bytes(raw)
        ends.see(piece)
        yield piece if isinstance(piece, bytes) else bytes(piece)


async def _pulled(output: Iterable[bytes] | AsyncIterable[bytes]) -> AsyncIterator[bytes]:
    """``output`` as an async iterator; a sync iterator (a generator, a file) is advanced
    in a worker thread, since producing its next piece may block."""
    if isinstance(output, AsyncIterable):
        async for piece in output:
            yield piece
        return
    if not isinstance(output, Iterator):
        for piece in output:  # a list or tuple of pieces: nothing blocks
            yield piece
        return
    while True:
        pulled = await asyncio.to_thread(_next_pieces, output)
        if not pulled:
            return
        for piece in pulled:
            yield piece


def _next_pieces(pieces: Iterator[bytes], want: int = 64 * 1024) -> list[bytes]:
    """The next pieces of ``pieces``, about ``want`` bytes of them (a file iterated line by
    line would cost a thread hop per line otherwise); [] once it is exhausted."""
    pulled: list[bytes] = []
    size = 0
    for piece in pieces:
        pulled.append(piece)
        size += len(piece)
        if size >= want or len(pulled) >= 1024:
            break
    return pulled


async def _slices(data: memoryview) -> AsyncIterator[bytes]:
    for start in range(0, len(data), CHUNK_BYTES):
        yield bytes(data[start : start + CHUNK_BYTES])


async def stash(
    store: BlobWriter, thread_id: str, output: ToolOutput, threshold: int = DEFAULT_THRESHOLD
) -> str:
    """The content to record for a tool's ``output``: the text itself when its UTF-8 size
    is at most ``threshold``, else an :func:`excerpt` of it, once it is stored as a blob
    referred to by ``thread_id``.

    ``output`` may be text, bytes (decoded as UTF-8, invalid bytes replaced) or a stream
    of bytes (async or sync iterable; see :data:`ToolOutput`). A stream is read until it
    passes the threshold, then streamed into the store: it is never held whole. Raises
    what the store raises (NotFound for a missing thread, StoreError, ...) and what the
    stream raises.
    """
    if isinstance(output, str):
        if len(output) * 4 <= threshold:  # cheap: no character is longer than 4 bytes
            return output
        data = output.encode()
        if len(data) <= threshold:
            return output
        return await _put(store, thread_id, _slices(memoryview(data)))
    if isinstance(output, bytes | bytearray | memoryview):
        view = memoryview(output).cast("B")
        if len(view) <= threshold:
            return bytes(view).decode("utf-8", errors="replace")
        return await _put(store, thread_id, _slices(view))
    pieces = _pulled(output)
    head: list[bytes] = []
    size = 0
    async for raw in pieces:
        piece = bytes(_as_bytes(raw))
        head.append(piece)
        size += len(piece)
        if size > threshold:
            break
    else:
        return b"".join(head).decode("utf-8", errors="replace")
    return await _put(store, thread_id, _chain(head, pieces))


async def _chain(first: list[bytes], rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    while first:
        yield first.pop(0)
    async for piece in rest:
        yield piece


async def _put(store: BlobWriter, thread_id: str, pieces: AsyncIterator[bytes]) -> str:
    ends = _Ends()
    ref = await store.put_blob(thread_id, _tapped(pieces, ends))
    head, tail = ends.ends()
    return excerpt(ref, head, tail)


async def stored_output(store: BlobWriter, thread_id: str, output: ToolOutput, threshold: int) -> str:
    """A tool's ``output`` as the text its result carries, clean (see :func:`~dormant.text.clean`).

    Text is cleaned before it is measured and stored; an output over ``threshold``
    bytes goes to the store as a blob (:func:`stash`) and the excerpt
    shown of it is cleaned too (a blob keeps its bytes as they were).
    """
    if isinstance(output, str):
        output = clean(output)
    return clean(await stash(store, thread_id, output, threshold))
