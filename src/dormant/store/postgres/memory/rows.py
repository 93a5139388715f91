"""The PostgreSQL store's memory rows: the :class:`~dormant.memory.backend.MemoryBackend`
of :class:`~dormant.store.postgres.backend.PostgresBackend`.

The rows live in the store's schema (tables from ``migrations/0007_memory_records.sql``)
and go through the store's connection pool and error translation
(:func:`~dormant.store.postgres.driver.translate`). Each operation is one transaction
on a pooled connection, run on the event loop the store runs on
(:func:`~dormant.store.loopcall.call_on_loop`): :class:`~dormant.memory.core.MemoryCore`
calls this backend from a worker thread, which blocks until the loop ran the job.
Memory writes do not go through the store's group-committing writer: an add reads
(dedup, the records it may supersede), asks the core's rule, then writes, which a
pipelined batch of single statements cannot hold. A deadlock or serialization failure
re-runs the whole transaction (at most :data:`RETRIES` times).

Full text is a ``tsvector`` column (``english`` over the CJK pre-split text, GIN
index). Vectors are a pgvector ``vector(dim)`` column with an HNSW index (cosine),
added when the first embedder claims the memory. Without the ``vector`` extension
(not installed on the server, or no right to create it), :attr:`vector_available`
is False and recall says it degraded to text + structure; it never fails.
"""

from __future__ import annotations

import asyncio
import random
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import msgspec
import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, PoolTimeout, TooManyRequests

from ....errors import StoreError, UsageError
from ....memory.backend import AddItem, AddResult, Decide, MemoryWrites, RebindMode, Search
from ....memory.fulltext import index_text
from ....memory.ranking import Candidate, FilterSpec
from ....memory.records import MemoryChange, MemoryRecord
from ...loopcall import call_on_loop
from ...rows import memory_params
from ..driver import RETRYABLE, Conn, sqlstate, translate
from . import reads, sql
from .reads import resolve

T = TypeVar("T")
#: Times a memory transaction is re-run after a deadlock or serialization failure.
RETRIES = 5


async def vector_schema(conn: Conn) -> str | None:
    """The schema of the ``vector`` extension, created if the server has it and we may
    (``conn`` in autocommit); None when vectors cannot be had here."""
    for _ in range(3):
        try:
            row = await (await conn.execute(sql.VECTOR_SCHEMA)).fetchone()
            if row is not None:
                return str(row[0])
            await conn.execute(sql.CREATE_VECTOR)
        except psycopg.errors.UniqueViolation:  # another process created it at the same moment
            continue
        except psycopg.Error:
            return None  # not installed on the server, or no right to create it
    return None


async def _history(
    c: Conn, tenant: str, op: str, subject: str, rec: str | None, actor: str, at: float, detail: str = ""
) -> None:
    await c.execute(sql.HISTORY, (tenant, op, subject, rec, actor, at, detail))


class PgMemoryRows:
    """Runs memory transactions on the store's pool, on the store's event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pool: Callable[[], AsyncConnectionPool[Conn] | None],
        vector_schema: str | None,
    ) -> None:
        self._loop = loop
        self._pool = pool
        self.vector_schema = vector_schema

    def run(self, job: Callable[[Conn], Awaitable[T]]) -> T:
        """``job`` in one transaction on a pooled connection; its value once committed."""
        return call_on_loop(self._loop, self.transaction(job))

    async def transaction(self, job: Callable[[Conn], Awaitable[T]]) -> T:
        """``job`` in one transaction on a pooled connection, on the store's event loop
        (re-run whole after a deadlock); its value once committed."""
        for attempt in range(RETRIES + 1):
            pool = self._pool()
            if pool is None:
                raise StoreError("the store is not open")
            try:
                async with pool.connection() as c, c.transaction():
                    if self.vector_schema is not None:
                        await c.execute(sql.SEARCH_PATH, (self.vector_schema,))
                    return await job(c)
            except (psycopg.Error, PoolTimeout, TooManyRequests) as exc:
                if sqlstate(exc) in RETRYABLE and attempt < RETRIES:
                    await asyncio.sleep(random.uniform(0.001, 0.02) * (attempt + 1))
                    continue
                raise translate(exc) from exc
        raise AssertionError("unreachable: the last attempt returns or raises")


class PostgresMemoryBackend:
    """Memory rows in the PostgreSQL store's schema, through the store's pool (see the module doc)."""

    def __init__(self, rows: PgMemoryRows) -> None:
        self._rows = rows
        #: the transactions it runs in (a slice's commit with memory writes runs there too)
        self.rows = rows
        self._dim: int | None = None
        self._dim_read = False

    @property
    def vector_available(self) -> bool:
        return self._rows.vector_schema is not None

    def close(self) -> None:
        """Nothing to release: the connections are the store's."""

    async def _vec_dim(self, c: Conn) -> int | None:
        if not self._dim_read and self.vector_available:
            row = await (await c.execute(sql.META_GET, ("vector_dim",))).fetchone()
            self._dim = int(row[0]) if row else None
            self._dim_read = True
        return self._dim

    def _write(self, job: Callable[[Conn], Awaitable[T]]) -> T:
        try:
            return self._rows.run(job)
        except BaseException:
            self._dim_read = False  # a rolled-back job may have added the vector column
            raise

    def check_embedder(self, name: str, dim: int) -> None:
        claim = f"{name}/{dim}"

        async def job(c: Conn) -> None:
            await c.execute(sql.META_LOCK)
            row = await (await c.execute(sql.META_GET, ("embedder",))).fetchone()
            if row is None:
                await c.execute(sql.META_PUT, ("embedder", claim))
            elif row[0] != claim:
                raise UsageError(f"this memory's vectors were made by {row[0]}, not {claim}")
            self._dim_read = False
            known = await self._vec_dim(c)
            if self.vector_available and known is None:
                await c.execute(sql.ADD_VECTOR_COLUMN.format(dim=int(dim)).encode())
                await c.execute(sql.ADD_VECTOR_INDEX)
                await c.execute(sql.META_PUT, ("vector_dim", str(dim)))
                self._dim = dim
            elif known is not None and known != dim:
                raise UsageError(f"this memory holds {known}-d vectors; the embedder gives {dim}-d")

        self._write(job)

    # -- writes ---------------------------------------------------------------------------

    def add_many(self, tenant: str, items: Sequence[AddItem], decide: Decide, actor: str) -> list[AddResult]:
        async def job(c: Conn) -> list[AddResult]:
            for subject in sorted({i.record.subject for i in items}):
                await c.execute(sql.SUBJECT_LOCK, (f"{tenant}/{subject}",))
            dim = await self._vec_dim(c)
            # a fresh list per run: a deadlock re-runs the whole transaction
            return [await self._add(c, tenant, item, decide, actor, dim) for item in items]

        return self._write(job)

    async def in_commit(self, c: Conn, writes: MemoryWrites) -> None:
        """``writes`` inside a slice's commit transaction on ``c`` (after the plan's rows):
        the rules of :meth:`add_many` and :meth:`forget`."""
        subjects = {i.record.subject for i in writes.adds} | {k for f in writes.forgets for k in f.keys}
        for subject in sorted(subjects):
            await c.execute(sql.SUBJECT_LOCK, (f"{writes.tenant}/{subject}",))
        try:
            dim = await self._vec_dim(c)
            for item in writes.adds:
                await self._add(c, writes.tenant, item, writes.decide, writes.actor, dim)
            for gone in writes.forgets:
                params = (gone.at, writes.tenant, gone.record_id, list(gone.keys))
                row = await (await c.execute(sql.FORGET, params)).fetchone()
                if row is not None:
                    await _history(
                        c, writes.tenant, "forget", row[0], gone.record_id, writes.actor, gone.at, gone.reason
                    )
        except BaseException:
            self._dim_read = False
            raise

    async def _add(
        self, c: Conn, tenant: str, item: AddItem, decide: Decide, actor: str, dim: int | None
    ) -> AddResult:
        rec = item.record
        subject = await resolve(c, tenant, rec.subject)
        if subject != rec.subject:
            rec = msgspec.structs.replace(rec, subject=subject)
        dup = await (await c.execute(sql.DUPLICATE, (tenant, subject, rec.content_hash))).fetchone()
        if dup is not None:
            # a repeat refreshes when the record was last observed (decay runs from it)
            await c.execute(sql.MERGE_IMPORTANCE, (rec.importance, rec.created_at, dup[0]))
            await _history(c, tenant, "update", subject, dup[1], actor, rec.created_at, "duplicate merged")
            merged = sql.to_record(dup)
            seen = max(merged.created_at, rec.created_at)
            importance = max(merged.importance, rec.importance)
            return AddResult(
                msgspec.structs.replace(merged, created_at=seen, importance=importance), duplicate=True
            )
        olds: list[MemoryRecord] = []
        if item.key is not None:
            cur = await c.execute(sql.SAME_KEY, (tenant, subject, rec.kind, item.key, rec.valid_from))
            olds = [sql.to_record(r) for r in await cur.fetchall()]
        if item.replaces:
            cur = await c.execute(sql.NAMED, (tenant, subject, list(item.replaces)))
            olds += [sql.to_record(r) for r in await cur.fetchall()]
        ids, until = decide(rec, olds)
        gone = tuple(dict.fromkeys(ids))
        if until is not None:
            rec = msgspec.structs.replace(rec, invalid_at=until)
        for old_id in gone:
            await c.execute(sql.INVALIDATE, (rec.valid_from, tenant, old_id, rec.valid_from))
            await _history(c, tenant, "supersede", subject, old_id, actor, rec.created_at, f"by {rec.id}")
        if item.vector is not None and dim is not None and len(item.vector) != dim:
            raise UsageError(f"this memory holds {dim}-d vectors; the embedder gives {len(item.vector)}-d")
        with_vector = item.vector is not None and dim is not None
        params = [*memory_params(item.key, rec, tenant, subject, Jsonb(rec.tags)), index_text(rec.text)]
        if with_vector and item.vector is not None:
            params.append(sql.vector_literal(item.vector))
        await c.execute(sql.INSERT_WITH_VECTOR if with_vector else sql.INSERT, params)
        await _history(c, tenant, "add", subject, rec.id, actor, rec.created_at)
        return AddResult(rec, superseded=gone)

    def touch(self, tenant: str, accesses: Sequence[tuple[str, float]]) -> None:
        if not accesses:
            return

        async def job(c: Conn) -> None:
            # in id order: two touching transactions never wait on each other in a cycle
            for rec_id, at in sorted(accesses):
                await c.execute(sql.TOUCH, (at, tenant, rec_id))

        self._write(job)

    def forget(
        self, tenant: str, keys: Sequence[str], record_id: str, now: float, actor: str, reason: str
    ) -> bool:
        async def job(c: Conn) -> bool:
            row = await (await c.execute(sql.FORGET, (now, tenant, record_id, list(keys)))).fetchone()
            if row is None:
                return False
            await _history(c, tenant, "forget", row[0], record_id, actor, now, reason)
            return True

        return self._write(job)

    def rebind(self, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str) -> int:
        async def job(c: Conn) -> int:
            for key in sorted((old, new)):
                await c.execute(sql.SUBJECT_LOCK, (f"{tenant}/{key}",))
            if mode in ("link", "unlink"):
                return await _link(c, tenant, old, new, mode, now, actor)
            return await _move(c, tenant, old, new, mode, now, actor)

        return self._write(job)

    def binding_meta(self) -> tuple[str, bool]:
        async def job(c: Conn) -> tuple[str, bool]:
            # made by the schema (or its migration); made here for a database that lost it
            await c.execute(sql.META_PUT, ("binding_secret", secrets.token_hex(32)))
            found = await (await c.execute(sql.BINDING_META)).fetchall()
            rows = {str(name): str(value) for name, value in found}
            return rows["binding_secret"], rows.get("binding_legacy") == "1"

        return self._write(job)

    def migrate_key(
        self, tenant: str, old: str, new: str, legacy: dict[str, str], now: float, actor: str
    ) -> int | None:
        async def job(c: Conn) -> int | None:
            for key in sorted((old, new)):
                await c.execute(sql.SUBJECT_LOCK, (f"{tenant}/{key}",))
            for part, h in sorted(legacy.items()):  # the unkeyed part hashes would reveal the parts
                await c.execute(sql.DROP_IDENTITY, (tenant, part, h, old, new))
            if await (await c.execute(sql.MOVED_FROM, (tenant, old))).fetchone() is not None:
                return None
            row = await (await c.execute(sql.KEY_KNOWN, {"tenant": tenant, "key": old})).fetchone()
            if row is None or not row[0]:
                return None
            moved = await _move(c, tenant, old, new, "move", now, actor)
            # the same identity, re-keyed: its history reads under the new key
            await c.execute(sql.MOVE_HISTORY, (new, tenant, old))
            await c.execute(sql.MOVE_LINKS, {"tenant": tenant, "old": old, "new": new})
            # the threads whose subject it is: a journaled change of their `_subject`
            # register (time travel and recovery see the new key from here on) and their row
            value = msgspec.json.encode(new).decode()
            await c.execute(sql.JOURNAL_SUBJECT, {"tenant": tenant, "old": old, "value": value, "now": now})
            await c.execute(sql.THREAD_SUBJECT, {"tenant": tenant, "old": old, "new": new, "value": value})
            return moved

        return self._write(job)

    def register_identity(self, tenant: str, key: str, parts: dict[str, str]) -> None:
        async def job(c: Conn) -> None:
            for part, h in sorted(parts.items()):
                await c.execute(sql.REGISTER_IDENTITY, (tenant, part, h, key))

        self._write(job)

    def save_dictionary(self, tenant: str, groups: Sequence[Sequence[str]]) -> None:
        async def job(c: Conn) -> None:
            await c.execute(sql.CLEAR_DICTIONARY, (tenant,))
            for g, terms in enumerate(groups):
                for p, term in enumerate(terms):
                    await c.execute(sql.DICTIONARY_TERM, (tenant, g, p, term))

        self._write(job)

    # -- reads (statements and row handling in memory_reads) ------------------------------

    def load_dictionary(self, tenant: str) -> list[list[str]]:
        return self._rows.run(lambda c: reads.dictionary(c, tenant))

    def keys_for_part(self, tenant: str, part: str, part_hash: str, after: str, limit: int) -> list[str]:
        return self._rows.run(lambda c: reads.keys_for_part(c, tenant, part, part_hash, after, limit))

    def resolve_scope(self, tenant: str, keys: Sequence[str], max_keys: int) -> list[str]:
        return self._rows.run(lambda c: reads.scope(c, tenant, keys, max_keys))

    def candidates(
        self, tenant: str, keys: Sequence[str], search: Search
    ) -> tuple[list[Candidate], list[str]]:
        async def job(c: Conn) -> tuple[list[Candidate], list[str]]:
            return await reads.candidates(
                c, tenant, keys, search, self.vector_available, await self._vec_dim(c)
            )

        return self._rows.run(job)

    def get(
        self, tenant: str, keys: Sequence[str], ids: Sequence[str], with_vectors: bool
    ) -> list[MemoryRecord]:
        if not ids:
            return []

        async def job(c: Conn) -> list[MemoryRecord]:
            vectors = with_vectors and await self._vec_dim(c) is not None
            return await reads.get(c, tenant, keys, ids, vectors)

        return self._rows.run(job)

    def list_records(
        self, tenant: str, keys: Sequence[str], spec: FilterSpec, now: float, before: int | None, limit: int
    ) -> tuple[list[MemoryRecord], int | None]:
        return self._rows.run(lambda c: reads.list_records(c, tenant, keys, spec, now, before, limit))

    def history(
        self, tenant: str, keys: Sequence[str], record_id: str | None, after: int, limit: int
    ) -> list[MemoryChange]:
        return self._rows.run(lambda c: reads.history(c, tenant, keys, record_id, after, limit))


async def _move(c: Conn, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str) -> int:
    """Move (or merge) ``old``'s records to ``new`` (through its moves); how many."""
    target = await resolve(c, tenant, new)
    if target == old:
        raise UsageError("cannot move a subject onto itself")
    op = "merge" if mode == "merge" else "rebind"
    dups = await (await c.execute(sql.MOVE_DUPLICATES, (target, tenant, old))).fetchall()
    for a_id, b_id in dups:
        await c.execute(sql.INVALIDATE, (now, tenant, a_id, now))
        await _history(c, tenant, "merge", old, a_id, actor, now, f"duplicate of {b_id}")
    moved = await (await c.execute(sql.MOVE_RECORDS, (target, tenant, old))).fetchall()
    for (rec_id,) in moved:
        await _history(c, tenant, op, target, rec_id, actor, now, f"{old} -> {target}")
    if not moved:
        await _history(c, tenant, op, target, None, actor, now, f"{old} -> {target}")
    await c.execute(sql.MOVE_CHAINS, (target, tenant, old))
    await c.execute(sql.MOVE, (tenant, old, target, now))
    await c.execute(sql.MOVE_IDENTITY, (target, tenant, old, target))
    return len(moved)


async def _link(c: Conn, tenant: str, a: str, b: str, mode: str, now: float, actor: str) -> int:
    """Link or unlink two keys (both directions); how many links changed (0 or 1)."""
    if a == b:
        raise UsageError("cannot link a key to itself")
    changed = 0
    for x, y in ((a, b), (b, a)):
        if mode == "link":
            cur = await c.execute(sql.LINK, (tenant, x, y, now))
        else:
            cur = await c.execute(sql.UNLINK, (tenant, x, y))
        changed += cur.rowcount
    if changed:
        await _history(c, tenant, mode, a, None, actor, now, f"{a} <-> {b}")
    return changed // 2
