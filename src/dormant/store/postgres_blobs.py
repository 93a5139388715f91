"""The PostgreSQL backend's blobs and thread deletion (a mixin of :class:`PostgresStore`).

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
from typing import TYPE_CHECKING

import psycopg
from psycopg_pool import PoolTimeout

from ..blobs import CHUNK_BYTES, TMP_PREFIX, Chunker, chunk_span, read_length, tmp_cutoff, tmp_ref
from ..errors import InvalidInput, NotFound, StoreError, StoreLocked
from ..records import BlobRef
from . import postgres_sql as q
from .rows import THREAD_TABLES

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

    from ..cache import ViewCache

#: How often (seconds) a put sweeps what failed writes left.
SWEEP_EVERY_S = 600.0

INSERT_CHUNK = "INSERT INTO blob_chunks (ref, idx, data) VALUES (%s, %s, %b)"
INSERT_REF = "INSERT INTO blob_refs (thread_id, ref) VALUES (%s, %s) ON CONFLICT DO NOTHING"
VISIBLE_BLOB = """
WITH RECURSIVE line (id, parent_id) AS (
    SELECT id, parent_id FROM threads WHERE id = %(thread)s
    UNION ALL
    SELECT t.id, t.parent_id FROM threads t JOIN line ON t.id = line.parent_id
)
SELECT b.size, b.chunk_size FROM blobs b
WHERE b.ref = %(ref)s AND b.size >= 0
  AND EXISTS (SELECT 1 FROM line JOIN blob_refs r ON r.thread_id = line.id AND r.ref = %(ref)s)
"""
# The wanted part of each chunk of a range: the first chunk from byte %(low)s, the last one
# up to byte %(high)s. substring() of an uncompressed TOASTed value fetches only the TOAST
# rows it needs.
READ_CHUNKS = """
SELECT idx, CASE
    WHEN idx = %(first)s AND idx = %(last)s
        THEN substring(data FROM %(low)s::integer + 1 FOR %(high)s::integer - %(low)s::integer)
    WHEN idx = %(first)s THEN substring(data FROM %(low)s::integer + 1)
    WHEN idx = %(last)s THEN substring(data FROM 1 FOR %(high)s::integer)
    ELSE data END
FROM blob_chunks WHERE ref = %(ref)s AND idx >= %(first)s AND idx <= %(last)s ORDER BY idx
"""
TREE = """
WITH RECURSIVE tree (id) AS (
    SELECT id FROM threads WHERE id = %s
    UNION
    SELECT t.id FROM threads t JOIN tree ON t.parent_id = tree.id
)
SELECT id FROM tree
"""


class PostgresBlobs:
    """Blobs (see :mod:`dormant.blobs`) and :meth:`delete_thread` on the PostgreSQL store."""

    #: bytes read_blob returned (for benchmarks)
    blob_read_bytes = 0
    _blobs_swept_at = float("-inf")

    if TYPE_CHECKING:
        clock: Callable[[], float]
        views: ViewCache
        lock_timeout_s: float

        def _reads(self) -> AsyncConnectionPool[q.Conn]: ...

    async def _begin(self, conn: q.Conn) -> None:
        """In a transaction: bound the waits for row locks like the writer's."""
        await conn.execute(f"SET LOCAL lock_timeout = {int(self.lock_timeout_s * 1000)}")

    # -- writing ---------------------------------------------------------------------

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        await self._thread_exists(thread_id)
        now = self.clock()
        if now - self._blobs_swept_at >= SWEEP_EVERY_S:
            await self.sweep_blobs()
        tmp = tmp_ref(now)
        chunker = Chunker()
        try:
            async with contextlib.aclosing(chunker.batches(chunks)) as batches:
                async for batch in batches:
                    await self._insert_chunks([(tmp, idx, data) for idx, data in batch])
                    batch.clear()  # written: let the chunks go before the next batch is cut
            blob = chunker.blob
            await self._finish_put(thread_id, tmp, blob, chunker.chunks)
        except BaseException:
            await self._forget(tmp)
            raise
        return blob

    async def _insert_chunks(self, rows: list[tuple[str, int, bytes]]) -> None:
        try:
            async with self._reads().connection() as conn, conn.transaction(), conn.cursor() as cursor:
                await cursor.executemany(INSERT_CHUNK, rows)
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc

    async def _finish_put(self, thread_id: str, tmp: str, blob: BlobRef, count: int) -> None:
        """One transaction: keep the chunks under the hash ref (a new blob) or drop them
        (a known one), and add the thread's reference."""
        try:
            async with self._reads().connection() as conn, conn.transaction():
                await self._begin(conn)
                found = await conn.execute("SELECT 1 FROM threads WHERE id = %s FOR KEY SHARE", (thread_id,))
                if await found.fetchone() is None:
                    raise NotFound(f"no thread {thread_id!r}")
                for _ in range(3):
                    known = await conn.execute(
                        "SELECT 1 FROM blobs WHERE ref = %s FOR KEY SHARE", (blob.ref,)
                    )
                    if await known.fetchone() is not None:
                        await conn.execute("DELETE FROM blob_chunks WHERE ref = %s", (tmp,))
                        break
                    inserted = await conn.execute(
                        "INSERT INTO blobs (ref, size, chunk_size, created_at) VALUES (%s, %s, %s, %s) "
                        "ON CONFLICT (ref) DO NOTHING RETURNING 1",
                        (blob.ref, blob.size, CHUNK_BYTES, self.clock()),
                    )
                    if await inserted.fetchone() is not None:
                        moved = await conn.execute(
                            "UPDATE blob_chunks SET ref = %s WHERE ref = %s", (blob.ref, tmp)
                        )
                        if moved.rowcount != count:
                            raise StoreError(
                                f"chunks of blob {blob.ref} vanished while it was written; retry"
                            )
                        break
                    # a put of the same content committed meanwhile: look again
                else:
                    raise StoreLocked(f"blob {blob.ref} kept changing while it was written; retry")
                await conn.execute(INSERT_REF, (thread_id, blob.ref))
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc

    async def _forget(self, tmp: str) -> None:
        """Best effort after a failed put: remove its chunks now rather than at the next sweep."""
        with contextlib.suppress(Exception):
            async with self._reads().connection() as conn:
                await conn.execute("DELETE FROM blob_chunks WHERE ref = %s", (tmp,))

    async def sweep_blobs(self) -> int:
        """Remove the ``tmp:`` chunks of writes that never finished, started more than an
        hour ago; returns how many went."""
        now = self.clock()
        self._blobs_swept_at = now
        try:
            async with self._reads().connection() as conn:
                cursor = await conn.execute(
                    "DELETE FROM blob_chunks WHERE ref >= %s AND ref < %s", (TMP_PREFIX, tmp_cutoff(now))
                )
                return int(cursor.rowcount)
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc

    # -- reading ---------------------------------------------------------------------

    async def _thread_exists(self, thread_id: str, conn: q.Conn | None = None) -> None:
        try:
            if conn is None:
                async with self._reads().connection() as own:
                    row = await (
                        await own.execute("SELECT 1 FROM threads WHERE id = %s", (thread_id,))
                    ).fetchone()
            else:
                row = await (
                    await conn.execute("SELECT 1 FROM threads WHERE id = %s", (thread_id,))
                ).fetchone()
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")

    async def _visible(self, conn: q.Conn, thread_id: str, ref: str) -> tuple[int, int]:
        """(size, chunk size) of ``ref`` as ``thread_id`` sees it, else NotFound."""
        row = await (await conn.execute(VISIBLE_BLOB, {"thread": thread_id, "ref": ref})).fetchone()
        if row is None:
            await self._thread_exists(thread_id, conn)
            raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")
        return int(row[0]), int(row[1])

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or an ancestor refers to it."""
        try:
            async with self._reads().connection() as conn:
                size, _ = await self._visible(conn, thread_id, ref)
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        return BlobRef(ref=ref, size=size)

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """A byte range of a blob ``thread_id`` may see; only the chunks holding it are read."""
        length = read_length(offset, length)
        try:
            async with self._reads().connection() as conn:
                size, chunk_bytes = await self._visible(conn, thread_id, ref)
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
                rows = await (await conn.execute(READ_CHUNKS, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        if [r[0] for r in rows] != list(span):  # deleted between the two statements
            raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")
        data = b"".join(bytes(r[1]) for r in rows)
        self.blob_read_bytes += len(data)
        return data

    # -- deleting --------------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread, its descendants, their rows and the blobs left unreferenced."""
        try:
            async with self._reads().connection() as conn, conn.transaction():
                await self._begin(conn)
                tree = await self._lock_tree(conn, thread_id)
                leased = await (
                    await conn.execute(
                        "SELECT id FROM threads WHERE id = ANY (%s) AND lease_token IS NOT NULL "
                        "AND lease_expires > %s LIMIT 1",
                        (tree, self.clock()),
                    )
                ).fetchone()
                if leased is not None:
                    raise InvalidInput(
                        f"thread {leased[0]!r} is running a slice; delete it once the slice ends"
                    )
                cursor = await conn.execute(
                    "DELETE FROM blob_refs WHERE thread_id = ANY (%s) RETURNING ref", (tree,)
                )
                refs = sorted({r[0] for r in await cursor.fetchall()})
                for table in THREAD_TABLES:
                    await conn.execute(f"DELETE FROM {table} WHERE thread_id = ANY (%s)", (tree,))
                await conn.execute("DELETE FROM threads WHERE id = ANY (%s)", (tree,))
                if refs:
                    await conn.execute(
                        "SELECT 1 FROM blobs WHERE ref = ANY (%s) ORDER BY ref FOR UPDATE", (refs,)
                    )
                    cursor = await conn.execute(
                        "DELETE FROM blobs b WHERE b.ref = ANY (%s) "
                        "AND NOT EXISTS (SELECT 1 FROM blob_refs r WHERE r.ref = b.ref) RETURNING b.ref",
                        (refs,),
                    )
                    unused = [r[0] for r in await cursor.fetchall()]
                    if unused:
                        await conn.execute("DELETE FROM blob_chunks WHERE ref = ANY (%s)", (unused,))
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        for gone in tree:
            self.views.discard(gone)
        return len(tree)

    @staticmethod
    async def _lock_tree(conn: q.Conn, thread_id: str) -> list[str]:
        """The thread and its descendants, their rows locked ``FOR UPDATE``; NotFound if missing.

        Once a parent is locked no child of it can be inserted; a child committed between
        reading the tree and locking it shows in the next read (a new snapshot), so it
        is read again until it stops growing.
        """
        tree: list[str] = []
        while True:
            found = [r[0] for r in await (await conn.execute(TREE, (thread_id,))).fetchall()]
            if not found:
                raise NotFound(f"no thread {thread_id!r}")
            if set(found) <= set(tree):
                return sorted(found)
            tree = sorted(set(tree) | set(found))
            await conn.execute("SELECT 1 FROM threads WHERE id = ANY (%s) ORDER BY id FOR UPDATE", (tree,))
