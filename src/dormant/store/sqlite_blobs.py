"""The SQLite backend's blobs and thread deletion (a mixin of :class:`SQLiteStore`).

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
that the sweep removes after :data:`~dormant.blobs.TMP_TTL_S`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterable, Callable, Iterable
from typing import TYPE_CHECKING, Any

import apsw

from ..blobs import (
    BATCH_BYTES,
    CHUNK_BYTES,
    TMP_PREFIX,
    TMP_TTL_S,
    Chunker,
    chunk_span,
    read_length,
    tmp_cutoff,
    tmp_ref,
)
from ..errors import InvalidInput, NotFound, StoreError
from ..records import BlobRef
from .rows import THREAD_TABLES
from .sqlite_sql import translate

if TYPE_CHECKING:
    from ..cache import ViewCache
    from .sqlite_writer import Conn, Job

#: How often (seconds) a put sweeps what failed writes left.
SWEEP_EVERY_S = 600.0
#: Chunks moved per write job after the upload (one batch's worth, 2 MiB); dropped, 4x that.
MOVE_CHUNKS = BATCH_BYTES // CHUNK_BYTES

INSERT_CHUNK = "INSERT INTO blob_chunks (ref, idx, data) VALUES (?, ?, ?)"
INSERT_REF = "INSERT INTO blob_refs (thread_id, ref) VALUES (?, ?) ON CONFLICT DO NOTHING"
# Start (or adopt) the move of a new blob's chunks: an invisible row, size -1.
MARK_BLOB = """
INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (?1, -1, ?2, ?3)
ON CONFLICT (ref) DO UPDATE SET created_at = excluded.created_at WHERE blobs.size < 0
"""
MOVE_CHUNKS_SQL = "UPDATE OR IGNORE blob_chunks SET ref = ?1 WHERE ref = ?2 AND idx >= ?3 AND idx < ?4"
DROP_CHUNKS = "DELETE FROM blob_chunks WHERE ref = ?1 AND idx >= ?2 AND idx < ?3"
COMPLETE_BLOB = """
INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (ref) DO UPDATE SET size = excluded.size, chunk_size = excluded.chunk_size,
    created_at = excluded.created_at
WHERE blobs.size < 0
"""
# The blob if the thread or one of its ancestors refers to it (complete blobs only).
VISIBLE_BLOB = """
WITH RECURSIVE line (id, parent_id) AS (
    SELECT id, parent_id FROM threads WHERE id = ?1
    UNION ALL
    SELECT t.id, t.parent_id FROM threads t JOIN line ON t.id = line.parent_id
)
SELECT b.size, b.chunk_size FROM blobs b
WHERE b.ref = ?2 AND b.size >= 0
  AND EXISTS (SELECT 1 FROM line JOIN blob_refs r ON r.thread_id = line.id AND r.ref = ?2)
"""
CHUNK_ROWS = "SELECT id, idx FROM blob_chunks WHERE ref = ? AND idx >= ? AND idx < ? ORDER BY idx"
CHILDREN = "SELECT id FROM threads WHERE parent_id IN (SELECT value FROM json_each(?))"
IN_IDS = "(SELECT value FROM json_each(?))"


class SQLiteBlobs:
    """Blobs (see :mod:`dormant.blobs`) and :meth:`delete_thread` on the SQLite store."""

    #: bytes read_blob returned (for benchmarks)
    blob_read_bytes = 0
    _blobs_swept_at = float("-inf")

    if TYPE_CHECKING:
        clock: Callable[[], float]
        views: ViewCache

        async def _write(self, job: Job, size: int = 256) -> Any: ...

        def _read(self) -> Conn: ...

    # -- writing ---------------------------------------------------------------------

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        self._thread_exists(thread_id)
        now = self.clock()
        if now - self._blobs_swept_at >= SWEEP_EVERY_S:
            await self.sweep_blobs()
        tmp = tmp_ref(now)
        chunker = Chunker()
        try:
            async with contextlib.aclosing(chunker.batches(chunks)) as batches:
                async for batch in batches:
                    await self._write(_insert_chunks(tmp, batch), sum(len(c) for _, c in batch) + 256)
                    batch.clear()  # written: let the chunks go before the next batch is cut
            blob = chunker.blob
            new = await self._write(_claim_blob(thread_id, blob.ref, self.clock()))
            if new:
                await self._move(tmp, blob, chunker.chunks)
                found = await self._write(_complete_blob(thread_id, blob, chunker.chunks, self.clock()))
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
                conn.execute(MOVE_CHUNKS_SQL, params)

            await self._write(job, 4096)

    async def _drop(self, tmp: str, count: int) -> None:
        """Delete the ``count`` chunks under ``tmp`` (the content was known), a few jobs."""
        for start in range(0, count, MOVE_CHUNKS * 4):
            params = (tmp, start, start + MOVE_CHUNKS * 4)

            def job(conn: Conn, params: tuple[str, int, int] = params) -> None:
                conn.execute(DROP_CHUNKS, params)

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
        self._blobs_swept_at = now

        def job(conn: Conn) -> int:
            conn.execute("DELETE FROM blob_chunks WHERE ref >= ? AND ref < ?", (TMP_PREFIX, tmp_cutoff(now)))
            removed = int(conn.changes())
            stale = conn.execute(
                "SELECT ref FROM blobs WHERE size < 0 AND created_at < ?", (now - TMP_TTL_S,)
            ).fetchall()
            for (ref,) in stale:
                conn.execute("DELETE FROM blob_chunks WHERE ref = ?", (ref,))
                removed += int(conn.changes())
                conn.execute("DELETE FROM blobs WHERE ref = ?", (ref,))
            return removed

        result: int = await self._write(job)
        return result

    # -- reading ---------------------------------------------------------------------

    def _thread_exists(self, thread_id: str) -> None:
        try:
            row = self._read().execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")

    def _visible(self, conn: Conn, thread_id: str, ref: str) -> tuple[int, int]:
        """(size, chunk size) of ``ref`` as ``thread_id`` sees it, else NotFound."""
        row = conn.execute(VISIBLE_BLOB, (thread_id, ref)).fetchone()
        if row is None:
            self._thread_exists(thread_id)
            raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")
        return int(row[0]), int(row[1])

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or an ancestor refers to it."""
        try:
            size, _ = self._visible(self._read(), thread_id, ref)
        except apsw.Error as exc:
            raise translate(exc) from exc
        return BlobRef(ref=ref, size=size)

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """A byte range of a blob ``thread_id`` may see: only the pages holding it are read
        (incremental blob I/O on the chunks' rows)."""
        length = read_length(offset, length)
        conn = self._read()
        parts: list[bytes] = []
        try:
            with conn:  # one snapshot: the row ids stay valid while they are read
                size, chunk_bytes = self._visible(conn, thread_id, ref)
                span = chunk_span(offset, length, size, chunk_bytes)
                if span:
                    rows = conn.execute(CHUNK_ROWS, (ref, span.start, span.stop)).fetchall()
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
        data = b"".join(parts)
        self.blob_read_bytes += len(data)
        return data

    # -- deleting --------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread, its descendants, their rows and the blobs left unreferenced."""

        def job(conn: Conn) -> list[str]:
            if conn.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
                raise NotFound(f"no thread {thread_id!r}")
            tree, level = [thread_id], [thread_id]
            while level:  # one pass over threads per generation (parent_id has no index)
                level = [r[0] for r in conn.execute(CHILDREN, (json.dumps(level),))]
                tree.extend(level)
            ids = json.dumps(tree)
            leased = conn.execute(
                f"SELECT id FROM threads WHERE id IN {IN_IDS} AND lease_token IS NOT NULL "
                "AND lease_expires > ? LIMIT 1",
                (ids, self.clock()),
            ).fetchone()
            if leased is not None:
                raise InvalidInput(f"thread {leased[0]!r} is running a slice; delete it once the slice ends")
            refs = {
                r[0]
                for r in conn.execute(
                    f"DELETE FROM blob_refs WHERE thread_id IN {IN_IDS} RETURNING ref", (ids,)
                )
            }
            for table in THREAD_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE thread_id IN {IN_IDS}", (ids,))
            conn.execute(f"DELETE FROM threads WHERE id IN {IN_IDS}", (ids,))
            for ref in sorted(refs):
                if conn.execute("SELECT 1 FROM blob_refs WHERE ref = ? LIMIT 1", (ref,)).fetchone() is None:
                    conn.execute("DELETE FROM blob_chunks WHERE ref = ?", (ref,))
                    conn.execute("DELETE FROM blobs WHERE ref = ?", (ref,))
            return tree

        tree: list[str] = await self._write(job, 4096)
        for gone in tree:
            self.views.discard(gone)
        return len(tree)


def _insert_chunks(tmp: str, batch: list[tuple[int, bytes]]) -> Job:
    def job(conn: Conn) -> None:
        conn.executemany(INSERT_CHUNK, ((tmp, idx, data) for idx, data in batch))

    return job


def _claim_blob(thread_id: str, ref: str, now: float) -> Job:
    """The job deciding a put's next step: True if its chunks must be moved to ``ref``
    (a new blob: marked), False if the blob is known (the reference is added here)."""

    def job(conn: Conn) -> bool:
        if conn.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
            raise NotFound(f"no thread {thread_id!r}")
        row = conn.execute("SELECT size FROM blobs WHERE ref = ?", (ref,)).fetchone()
        if row is not None and row[0] >= 0:
            conn.execute(INSERT_REF, (thread_id, ref))
            return False
        conn.execute(MARK_BLOB, (ref, CHUNK_BYTES, now))
        return True

    return job


def _drop_all(tmp: str) -> Job:
    def job(conn: Conn) -> None:
        conn.execute("DELETE FROM blob_chunks WHERE ref = ?", (tmp,))

    return job


def _complete_blob(thread_id: str, blob: BlobRef, count: int, now: float) -> Job:
    """The job ending a new blob's move: every chunk there, the row complete, the thread's
    reference added. False (after undoing the marker) if the thread is gone."""

    def job(conn: Conn) -> bool:
        if conn.execute("SELECT 1 FROM threads WHERE id = ?", (thread_id,)).fetchone() is None:
            row = conn.execute("SELECT size FROM blobs WHERE ref = ?", (blob.ref,)).fetchone()
            if row is not None and row[0] < 0:
                conn.execute("DELETE FROM blob_chunks WHERE ref = ?", (blob.ref,))
                conn.execute("DELETE FROM blobs WHERE ref = ?", (blob.ref,))
            return False
        stored = conn.execute("SELECT count(*) FROM blob_chunks WHERE ref = ?", (blob.ref,)).fetchone()[0]
        if stored != count:
            raise StoreError(f"chunks of blob {blob.ref} vanished while it was written; retry")
        conn.execute(COMPLETE_BLOB, (blob.ref, blob.size, CHUNK_BYTES, now))
        conn.execute(INSERT_REF, (thread_id, blob.ref))
        return True

    return job
