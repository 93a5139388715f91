"""The PostgreSQL backend's blobs and thread deletion.

These run on pooled connections, not the group writer: a blob's chunks are written
in transactions of a few MB each (under a ``tmp:`` ref, hashed on the way), then one
transaction moves them to the hash ref — cheap here, since an UPDATE that leaves a
TOASTed value alone keeps pointing at the same out-of-line data — or drops them if
the content is already stored, and adds the thread's reference.

Locks, always threads before blobs: a put holds its thread row and the blob row
``FOR KEY SHARE`` until it commits; :meth:`delete_thread` takes them ``FOR UPDATE``
and only then looks for references, in a later statement (a fresh snapshot under
READ COMMITTED), so a blob gaining a reference concurrently is never collected.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterable, Callable, Iterable

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import InvalidInput, NotFound, StoreError, StoreLocked
from ...records import BlobRef
from ...tools.blobs import CHUNK_BYTES, TMP_PREFIX, chunk_span, spool, tmp_cutoff, tmp_ref
from . import sql
from .driver import Conn, translate

#: How often (seconds) a put sweeps what failed writes left.
SWEEP_EVERY_S = 600.0


class PostgresBlobs:
    """Blobs (see :mod:`dormant.tools.blobs`) and thread deletion over the store's read pool.

    ``reads`` returns the open pool (or raises StoreError when the store is closed).
    """

    def __init__(
        self,
        reads: Callable[[], AsyncConnectionPool[Conn]],
        clock: Callable[[], float],
        lock_timeout_s: float,
    ) -> None:
        self._reads = reads
        self.clock = clock
        self.lock_timeout_s = lock_timeout_s
        self._blobs_swept_at = float("-inf")

    async def _begin(self, conn: Conn) -> None:
        """In a transaction: bound the waits for row locks like the writer's."""
        await conn.execute(sql.SET_LOCAL_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)))

    # -- writing ---------------------------------------------------------------------

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        await self._thread_exists(thread_id)
        now = self.clock()
        if now - self._blobs_swept_at >= SWEEP_EVERY_S:
            await self.sweep_blobs()
        tmp = tmp_ref(now)
        try:
            blob, count = await spool(chunks, lambda batch: self._insert_chunks(tmp, batch))
            await self._finish_put(thread_id, tmp, blob, count)
        except BaseException:
            await self._forget(tmp)
            raise
        return blob

    async def _insert_chunks(self, tmp: str, batch: list[tuple[int, bytes]]) -> None:
        try:
            async with self._reads().connection() as conn, conn.transaction(), conn.cursor() as cursor:
                await cursor.executemany(sql.INSERT_CHUNK, [(tmp, idx, data) for idx, data in batch])
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    async def _finish_put(self, thread_id: str, tmp: str, blob: BlobRef, count: int) -> None:
        """One transaction: keep the chunks under the hash ref (a new blob) or drop them
        (a known one), and add the thread's reference."""
        try:
            async with self._reads().connection() as conn, conn.transaction():
                await self._begin(conn)
                found = await conn.execute(sql.SHARE_THREAD, (thread_id,))
                if await found.fetchone() is None:
                    raise NotFound(f"no thread {thread_id!r}")
                for _ in range(3):
                    known = await conn.execute(sql.SHARE_BLOB, (blob.ref,))
                    if await known.fetchone() is not None:
                        await conn.execute(sql.DELETE_CHUNKS, (tmp,))
                        break
                    inserted = await conn.execute(
                        sql.INSERT_BLOB,
                        (blob.ref, blob.size, CHUNK_BYTES, self.clock()),
                    )
                    if await inserted.fetchone() is not None:
                        moved = await conn.execute(sql.MOVE_CHUNKS, (blob.ref, tmp))
                        if moved.rowcount != count:
                            raise StoreError(
                                f"chunks of blob {blob.ref} vanished while it was written; retry"
                            )
                        break
                    # a put of the same content committed meanwhile: look again
                else:
                    raise StoreLocked(f"blob {blob.ref} kept changing while it was written; retry")
                await conn.execute(sql.INSERT_REF, (thread_id, blob.ref))
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    async def _forget(self, tmp: str) -> None:
        """Best effort after a failed put: remove its chunks now rather than at the next sweep."""
        with contextlib.suppress(Exception):
            async with self._reads().connection() as conn:
                await conn.execute(sql.DELETE_CHUNKS, (tmp,))

    async def sweep_blobs(self) -> int:
        """Remove the ``tmp:`` chunks of writes that never finished, started more than an
        hour ago; returns how many went."""
        now = self.clock()
        self._blobs_swept_at = now
        try:
            async with self._reads().connection() as conn:
                cursor = await conn.execute(sql.SWEEP_CHUNKS, (TMP_PREFIX, tmp_cutoff(now)))
                return int(cursor.rowcount)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    # -- reading ---------------------------------------------------------------------

    async def _thread_exists(self, thread_id: str, conn: Conn | None = None) -> None:
        try:
            if conn is None:
                async with self._reads().connection() as own:
                    row = await (await own.execute(sql.THREAD_EXISTS, (thread_id,))).fetchone()
            else:
                row = await (await conn.execute(sql.THREAD_EXISTS, (thread_id,))).fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")

    async def _visible(self, conn: Conn, thread_id: str, ref: str) -> tuple[int, int] | None:
        """(size, chunk size) of ``ref`` as ``thread_id`` sees it; None if not visible,
        NotFound if the thread is missing."""
        row = await (await conn.execute(sql.VISIBLE_BLOB, {"thread": thread_id, "ref": ref})).fetchone()
        if row is None:
            await self._thread_exists(thread_id, conn)
            return None
        return int(row[0]), int(row[1])

    async def part_bytes_since(self, thread_id: str, since: float) -> int:
        """Bytes of the parts ``thread_id`` took since ``since`` (0 for a missing thread)."""
        try:
            async with self._reads().connection() as conn:
                cur = await conn.execute(sql.PART_BYTES_SINCE, {"t": thread_id, "since": since})
                row = await cur.fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return int(row[0]) if row else 0

    async def blob_size(self, thread_id: str, ref: str) -> int | None:
        """The size of ``ref`` if ``thread_id`` or an ancestor refers to it, else None."""
        try:
            async with self._reads().connection() as conn:
                found = await self._visible(conn, thread_id, ref)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return None if found is None else found[0]

    async def read_blob(self, thread_id: str, ref: str, offset: int, length: int) -> bytes | None:
        """A byte range (validated by the caller) of a blob ``thread_id`` may see, None if
        it may not; only the chunks holding the range are read."""
        try:
            async with self._reads().connection() as conn:
                found = await self._visible(conn, thread_id, ref)
                if found is None:
                    return None
                size, chunk_bytes = found
                span = chunk_span(offset, length, size, chunk_bytes)
                if not span:
                    return b""
                params = {
                    "ref": ref,
                    "first": span.start,
                    "last": span[-1],
                    "low": offset - span.start * chunk_bytes,
                    "high": min(size, offset + length) - span[-1] * chunk_bytes,
                }
                rows = await (await conn.execute(sql.READ_CHUNKS, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        if [r[0] for r in rows] != list(span):  # deleted between the two statements
            return None
        return b"".join(bytes(r[1]) for r in rows)

    # -- deleting --------------------------------------------------------------------

    async def delete_threads(self, thread_id: str) -> list[str]:
        """Delete a thread, its descendants, their rows and the blobs left unreferenced;
        the ids of the threads deleted."""
        try:
            async with self._reads().connection() as conn, conn.transaction():
                await self._begin(conn)
                tree = await self._lock_tree(conn, thread_id)
                leased = await (await conn.execute(sql.LEASED_IN_TREE, (tree, self.clock()))).fetchone()
                if leased is not None:
                    raise InvalidInput(
                        f"thread {leased[0]!r} is running a slice; delete it once the slice ends"
                    )
                cursor = await conn.execute(sql.DELETE_TREE_REFS, (tree,))
                refs = sorted({r[0] for r in await cursor.fetchall()})
                for statement in sql.DELETE_TREE_ROWS:
                    await conn.execute(statement, (tree,))
                await conn.execute(sql.DELETE_TREE, (tree,))
                if refs:
                    await conn.execute(sql.LOCK_BLOBS, (refs,))
                    cursor = await conn.execute(sql.DELETE_UNUSED_BLOBS, (refs,))
                    unused = [r[0] for r in await cursor.fetchall()]
                    if unused:
                        await conn.execute(sql.DELETE_BLOB_CHUNKS, (unused,))
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return tree

    @staticmethod
    async def _lock_tree(conn: Conn, thread_id: str) -> list[str]:
        """The thread and its descendants, their rows locked ``FOR UPDATE``; NotFound if missing.

        Once a parent is locked no child of it can be inserted; a child committed between
        reading the tree and locking it shows in the next read (a new snapshot), so it
        is read again until it stops growing.
        """
        tree: list[str] = []
        while True:
            found = [r[0] for r in await (await conn.execute(sql.TREE, (thread_id,))).fetchall()]
            if not found:
                raise NotFound(f"no thread {thread_id!r}")
            if set(found) <= set(tree):
                return sorted(found)
            tree = sorted(set(tree) | set(found))
            await conn.execute(sql.LOCK_TREE, (tree,))
