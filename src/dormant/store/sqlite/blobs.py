"""The SQLite backend's blobs: a part the backend owns, writing through its group writer.

A blob is written in bounded jobs of the group writer, so neither RAM nor the
writer is held for long whatever its size: its chunks go in under a ``tmp:`` ref
(hashed on the way); then, if the content is new, they are moved to the hash ref,
again in bounded jobs. SQLite rewrites a whole row (256 KiB of chunk) to change its
key, so moving 200 MB in one transaction would hold the writer — on the event
loop's thread — for seconds. While the move runs, the ``blobs`` row is a *marker*
(``size = -1``): invisible to readers, and adopted by any later put of the same
content. The move uses ``UPDATE OR IGNORE``: a chunk another put of the same content
already moved is the same bytes (same hash, same chunking), so it is kept and ours
dropped. The last job checks every chunk is there, completes the row and adds the
thread's reference, atomically. Failed writes leave ``tmp:`` chunks or a marker
that the sweep removes after :data:`~dormant.tools.blobs.TMP_TTL_S`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Any

import apsw

from ...errors import NotFound, StoreError
from ...records import BlobRef
from ...tools.blobs import (
    BATCH_BYTES,
    CHUNK_BYTES,
    TMP_PREFIX,
    TMP_TTL_S,
    Chunker,
    chunk_span,
    tmp_cutoff,
    tmp_ref,
)
from . import sql
from .connect import translate
from .writer import Conn, Job

#: How often (seconds) a put sweeps what failed writes left.
SWEEP_EVERY_S = 600.0
#: Chunks moved per write job after the upload (one batch's worth, 2 MiB); dropped, 4x that.
MOVE_CHUNKS = BATCH_BYTES // CHUNK_BYTES

#: The group writer's submit: run a job in a committed transaction (job, size in bytes).
Write = Callable[[Job, int], Awaitable[Any]]


class SQLiteBlobs:
    """Blobs (see :mod:`dormant.tools.blobs`) of one SQLite backend: writes go through its
    group writer (``write``), reads through its API connection (``read``)."""

    def __init__(self, write: Write, read: Callable[[], Conn], clock: Callable[[], float]) -> None:
        self._write = write
        self._read = read
        self.clock = clock
        self._swept_at = float("-inf")

    # -- writing ---------------------------------------------------------------------

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        self._thread_exists(thread_id)
        now = self.clock()
        if now - self._swept_at >= SWEEP_EVERY_S:
            await self.sweep_blobs()
        tmp = tmp_ref(now)
        chunker = Chunker()
        try:
            async with contextlib.aclosing(chunker.batches(chunks)) as batches:
                async for batch in batches:
                    await self._write(_insert_chunks(tmp, batch), sum(len(c) for _, c in batch) + 256)
                    batch.clear()  # written: let the chunks go before the next batch is cut
            blob = chunker.blob
            new = await self._write(_claim_blob(thread_id, blob.ref, self.clock()), 256)
            if new:
                await self._move(tmp, blob, chunker.chunks)
                found = await self._write(_complete_blob(thread_id, blob, chunker.chunks, self.clock()), 256)
                if not found:
                    raise NotFound(f"no thread {thread_id!r} (deleted while its blob was written)")
        except BaseException:
            await self._forget(tmp)
            raise
        # committed; what is left under tmp is garbage, which the sweep would remove too
        with contextlib.suppress(Exception):
            if new:
                await self._write(_drop_all(tmp), 4096)  # chunks another put had moved first
            else:
                await self._drop(tmp, chunker.chunks)
        return blob

    async def _move(self, tmp: str, blob: BlobRef, count: int) -> None:
        """Move the chunks under ``tmp`` to ``blob.ref``, a few MB per job."""
        for start in range(0, count, MOVE_CHUNKS):
            params = (blob.ref, tmp, start, start + MOVE_CHUNKS)

            def job(conn: Conn, params: tuple[str, str, int, int] = params) -> None:
                conn.execute(sql.MOVE_CHUNKS, params)

            await self._write(job, 4096)

    async def _drop(self, tmp: str, count: int) -> None:
        """Delete the ``count`` chunks under ``tmp`` (the content was known), a few jobs."""
        for start in range(0, count, MOVE_CHUNKS * 4):
            params = (tmp, start, start + MOVE_CHUNKS * 4)

            def job(conn: Conn, params: tuple[str, int, int] = params) -> None:
                conn.execute(sql.DROP_CHUNK_RANGE, params)

            await self._write(job, 4096)

    async def _forget(self, tmp: str) -> None:
        """Best effort after a failed put: remove its ``tmp:`` chunks now rather than at the
        next sweep. A failure here changes nothing for the caller."""
        try:
            await self._write(_drop_all(tmp), 4096)
        except Exception:  # the sweep removes them later
            return

    async def sweep_blobs(self) -> int:
        """Remove what writes that never finished left behind more than an hour ago
        (``tmp:`` chunks, unfinished moves); returns how many chunks went."""
        now = self.clock()
        self._swept_at = now

        def job(conn: Conn) -> int:
            conn.execute(sql.SWEEP_TMP_CHUNKS, (TMP_PREFIX, tmp_cutoff(now)))
            removed = int(conn.changes())
            for (ref,) in conn.execute(sql.STALE_MARKERS, (now - TMP_TTL_S,)).fetchall():
                conn.execute(sql.DROP_CHUNKS, (ref,))
                removed += int(conn.changes())
                conn.execute(sql.DROP_BLOB, (ref,))
            return removed

        result: int = await self._write(job, 256)
        return result

    # -- reading ---------------------------------------------------------------------

    def _thread_exists(self, thread_id: str) -> None:
        try:
            row = self._read().execute(sql.THREAD_EXISTS, (thread_id,)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")

    def _visible(self, conn: Conn, thread_id: str, ref: str) -> tuple[int, int] | None:
        """(size, chunk size) of ``ref`` as ``thread_id`` sees it; None if not visible,
        NotFound if the thread is missing."""
        row = conn.execute(sql.VISIBLE_BLOB, (thread_id, ref)).fetchone()
        if row is None:
            self._thread_exists(thread_id)
            return None
        return int(row[0]), int(row[1])

    async def part_bytes_since(self, thread_id: str, since: float) -> int:
        """Bytes of the parts ``thread_id`` took since ``since`` (0 for a missing thread)."""
        try:
            row = self._read().execute(sql.PART_BYTES_SINCE, (thread_id, since)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return int(row[0]) if row else 0

    async def blob_size(self, thread_id: str, ref: str) -> int | None:
        """The size of ``ref`` if ``thread_id`` or an ancestor refers to it, else None."""
        try:
            seen = self._visible(self._read(), thread_id, ref)
        except apsw.Error as exc:
            raise translate(exc) from exc
        return seen[0] if seen is not None else None

    async def read_blob(self, thread_id: str, ref: str, offset: int, length: int) -> bytes | None:
        """A byte range of a blob ``thread_id`` may see (None if not visible): only the
        pages holding it are read (incremental blob I/O on the chunks' rows)."""
        conn = self._read()
        parts: list[bytes] = []
        try:
            with conn:  # one snapshot: the row ids stay valid while they are read
                seen = self._visible(conn, thread_id, ref)
                if seen is None:
                    return None
                size, chunk_bytes = seen
                span = chunk_span(offset, length, size, chunk_bytes)
                if span:
                    rows = conn.execute(sql.CHUNK_ROWS, (ref, span.start, span.stop)).fetchall()
                    if [r[1] for r in rows] != list(span):
                        raise StoreError(f"blob {ref!r} is missing chunks; the database is damaged")
                    end = min(size, offset + length)
                    for rowid, idx in rows:
                        start = idx * chunk_bytes
                        low, high = max(0, offset - start), min(chunk_bytes, end - start)
                        blob = conn.blob_open("main", "blob_chunks", "data", rowid, False)
                        try:
                            blob.seek(low)
                            parts.append(blob.read(high - low))
                        finally:
                            blob.close()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return b"".join(parts)


def _insert_chunks(tmp: str, batch: list[tuple[int, bytes]]) -> Job:
    def job(conn: Conn) -> None:
        conn.executemany(sql.INSERT_CHUNK, ((tmp, idx, data) for idx, data in batch))

    return job


def _claim_blob(thread_id: str, ref: str, now: float) -> Job:
    """The job deciding a put's next step: True if its chunks must be moved to ``ref``
    (a new blob: marked), False if the blob is known (the reference is added here)."""

    def job(conn: Conn) -> bool:
        if conn.execute(sql.THREAD_EXISTS, (thread_id,)).fetchone() is None:
            raise NotFound(f"no thread {thread_id!r}")
        row = conn.execute(sql.BLOB_SIZE, (ref,)).fetchone()
        if row is not None and row[0] >= 0:
            conn.execute(sql.INSERT_REF, (thread_id, ref))
            return False
        conn.execute(sql.MARK_BLOB, (ref, CHUNK_BYTES, now))
        return True

    return job


def _drop_all(tmp: str) -> Job:
    def job(conn: Conn) -> None:
        conn.execute(sql.DROP_CHUNKS, (tmp,))

    return job


def _complete_blob(thread_id: str, blob: BlobRef, count: int, now: float) -> Job:
    """The job ending a new blob's move: every chunk there, the row complete, the thread's
    reference added. False (after undoing the marker) if the thread is gone."""

    def job(conn: Conn) -> bool:
        if conn.execute(sql.THREAD_EXISTS, (thread_id,)).fetchone() is None:
            row = conn.execute(sql.BLOB_SIZE, (blob.ref,)).fetchone()
            if row is not None and row[0] < 0:
                conn.execute(sql.DROP_CHUNKS, (blob.ref,))
                conn.execute(sql.DROP_BLOB, (blob.ref,))
            return False
        stored = conn.execute(sql.COUNT_CHUNKS, (blob.ref,)).fetchone()[0]
        if stored != count:
            raise StoreError(f"chunks of blob {blob.ref} vanished while it was written; retry")
        conn.execute(sql.COMPLETE_BLOB, (blob.ref, blob.size, CHUNK_BYTES, now))
        conn.execute(sql.INSERT_REF, (thread_id, blob.ref))
        return True

    return job
