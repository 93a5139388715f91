"""The SQLite store's memory rows: the :class:`~dormant.memory.backend.MemoryBackend` of
:class:`~dormant.store.sqlite.backend.SQLiteBackend`, reached as its ``memory_backend``.

The rows live in the store's file (tables from ``migrations/0005_memory_records.sql``)
and go through the store's connections: each write is a job of the store's
group-committing writer (same file, same transactions, errors translated by the
store's :func:`~dormant.store.sqlite.connect.translate`), each read runs on the
store's reader connection. :class:`StoreRows` hands the jobs to the event loop
the store runs on; :class:`~dormant.memory.core.MemoryCore` calls this backend from
a worker thread (the embedder must stay off the loop), so every method blocks
that thread until the loop ran its job. Called on the loop's own thread, it
raises instead of deadlocking.

Full text is FTS5 (contentless, ``porter unicode61``, CJK pre-split into bigrams
by :mod:`~dormant.memory.fulltext`); vectors are a ``sqlite-vec`` ``vec0`` table
partitioned by subject, so a scoped KNN reads one subject's vectors only. When
the extension could not be loaded on the store's connections,
:attr:`vector_available` is False and recall says it degraded to text + structure.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import msgspec

from ....errors import StoreError, UsageError
from ....memory.backend import AddItem, AddResult, Decide, MemoryWrites, RebindMode, Search
from ....memory.fulltext import index_text
from ....memory.ranking import Candidate, FilterSpec
from ....memory.records import MemoryChange, MemoryRecord
from ...rows import memory_params, row_memory_change
from ..connect import load_vector_extension
from . import search as memory_search
from . import write
from .link import StoreRows
from .readers import ReaderPool
from .sql import COLS as _COLS
from .sql import VEC_CHUNK, VEC_PARTITION_INDEX, Conn, pack, unpack
from .sql import filter_sql as _filter
from .sql import marks as _in
from .sql import to_record as _record

T = TypeVar("T")


class MemoryRows:
    """The memory rows of one SQLite backend, built when the store opens (they need the
    store's event loop and its open connections)."""

    def __init__(
        self, submit: Callable[[Callable[[Conn], Any], int], Awaitable[Any]], reader: Callable[[], Conn]
    ) -> None:
        self._submit = submit
        self._reader = reader
        self._backend: SQLiteMemoryBackend | None = None
        self._pool: ReaderPool | None = None

    def open(self, conns: Sequence[Conn], connect: Callable[[], Conn] | None = None) -> None:
        """On the store's event loop, as it opens: jobs go to ``submit`` (the store's writer
        queue) and ``reader``; sqlite-vec is loaded into each of ``conns`` (when it cannot be,
        :attr:`~SQLiteMemoryBackend.vector_available` is False and recall degrades).
        ``connect`` (a file store) opens another connection to the file: reads then run
        on a :class:`ReaderPool` of those, in the worker thread that asks, with no hop."""
        loaded = all([load_vector_extension(conn) for conn in {id(c): c for c in conns}.values()])
        if connect is not None:
            self._pool = ReaderPool(lambda: _pool_conn(connect, loaded))
        rows = StoreRows(asyncio.get_running_loop(), self._submit, self._reader, self._pool)
        self._backend = SQLiteMemoryBackend(rows, vector_available=loaded)

    def close(self) -> None:
        """Close the read pool (as the store closes)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    async def upgrade(self) -> None:
        """On the store's event loop, once opened: add what a file made by an older
        version lacks (the vector table's partition index, :data:`VEC_PARTITION_INDEX`).
        Reads first; writes only when something is missing."""
        backend = self.rows()
        if not backend.vector_available:
            return
        if not _needs_partition_index(self._reader()):
            return

        def job(c: Conn) -> None:
            c.execute(VEC_PARTITION_INDEX)

        await self._submit(job, 256)

    def rows(self) -> SQLiteMemoryBackend:
        """The rows of the opened store (StoreError before it was opened; once it is closed,
        each of their operations raises StoreError: its writer and reader are gone)."""
        if self._backend is None:
            raise StoreError("the store is not open")
        return self._backend


def _pool_conn(connect: Callable[[], Conn], vectors: bool) -> Conn:
    """A read-only connection of the pool, with sqlite-vec when the store's have it."""
    conn = connect()
    try:
        conn.execute("PRAGMA query_only = 1")
        if vectors and not load_vector_extension(conn):
            raise StoreError("sqlite-vec loaded on the store's connections but not on a new one")
    except BaseException:
        conn.close()
        raise
    return conn


def _needs_partition_index(c: Conn) -> bool:
    """Whether the vector table exists without :data:`VEC_PARTITION_INDEX`."""
    names = {
        name
        for (name,) in c.execute(
            "SELECT name FROM sqlite_master "
            "WHERE name IN ('memory_vec_chunks', 'memory_vec_chunks_partition')"
        )
    }
    return names == {"memory_vec_chunks"}


class SQLiteMemoryBackend:
    """Memory rows in the SQLite store's file, through the store's writer and reader."""

    def __init__(self, rows: StoreRows, *, vector_available: bool) -> None:
        self._rows = rows
        self._vec = vector_available
        self._dim: int | None = None
        self._dim_read = False

    # -- set-up ---------------------------------------------------------------------------

    def _vec_dim(self, c: Conn) -> int | None:
        if not self._dim_read:
            row = c.execute("SELECT value FROM memory_meta WHERE name = 'vector_dim'").fetchone()
            self._dim = int(row[0]) if row else None
            self._dim_read = True
        return self._dim

    def _ensure_vec(self, c: Conn, dim: int) -> None:
        known = self._vec_dim(c)
        if known == dim:
            return
        if known is not None:
            raise UsageError(f"this memory holds {known}-d vectors; the embedder gives {dim}-d")
        c.execute(
            f"CREATE VIRTUAL TABLE IF NOT EXISTS memory_vec USING vec0("
            f"subject text partition key, embedding float[{int(dim)}] distance_metric=cosine, "
            f"chunk_size={VEC_CHUNK})"
        )
        c.execute(VEC_PARTITION_INDEX)
        c.execute("INSERT OR REPLACE INTO memory_meta VALUES ('vector_dim', ?)", (str(dim),))
        self._dim = dim

    def _write(self, job: Callable[[Conn], T], size: int = 1024) -> T:
        try:
            return self._rows.write(job, size)
        except BaseException:
            self._dim_read = False  # a rolled-back job may have created the vector table
            raise

    def check_embedder(self, name: str, dim: int) -> None:
        def job(c: Conn) -> None:
            row = c.execute("SELECT value FROM memory_meta WHERE name = 'embedder'").fetchone()
            if row is None:
                c.execute("INSERT INTO memory_meta VALUES ('embedder', ?)", (f"{name}/{dim}",))
            elif row[0] != f"{name}/{dim}":
                raise UsageError(f"this memory's vectors were made by {row[0]}, not {name}/{dim}")
            if self._vec:
                # the vector table is made here, in a commit of its own: a slice's commit
                # that writes the first vectors then never creates (and rolls back) a table
                self._ensure_vec(c, dim)

        return self._write(job)

    @property
    def vector_available(self) -> bool:
        return self._vec

    def close(self) -> None:
        """Nothing to release: the connections are the store's."""

    # -- writes ---------------------------------------------------------------------------

    def add_many(self, tenant: str, items: Sequence[AddItem], decide: Decide, actor: str) -> list[AddResult]:
        def job(c: Conn) -> list[AddResult]:
            # a fresh list per run: the writer re-runs a batch's jobs after a rollback
            return [self._add(c, tenant, item, decide, actor) for item in items]

        size = sum(len(item.record.text) + 4 * len(item.vector or ()) for item in items) + 512
        return self._write(job, size)

    def in_commit(self, writes: MemoryWrites) -> Callable[[Conn], None]:
        """A step of a slice's commit job (the writer's transaction, after the plan's rows):
        ``writes``' adds and forgets with the rules of :meth:`add_many` and :meth:`forget`."""

        def step(c: Conn) -> None:
            try:
                for item in writes.adds:
                    self._add(c, writes.tenant, item, writes.decide, writes.actor)
                for gone in writes.forgets:
                    write.forget(
                        c, writes.tenant, gone.keys, gone.record_id, gone.at, writes.actor, gone.reason
                    )
            except BaseException:
                self._dim_read = False
                raise

        return step

    def _add(self, c: Conn, tenant: str, item: AddItem, decide: Decide, actor: str) -> AddResult:
        rec = item.record
        subject = write.resolve(c, tenant, rec.subject)
        if subject != rec.subject:
            rec = msgspec.structs.replace(rec, subject=subject)
        dup = c.execute(
            f"SELECT {_COLS} FROM memory_records WHERE tenant = ? AND subject = ? AND content_hash = ? "
            "AND invalid_at IS NULL",
            (tenant, subject, rec.content_hash),
        ).fetchone()
        if dup is not None:
            # a repeat refreshes when the record was last observed (decay runs from it)
            c.execute(
                "UPDATE memory_records SET importance = max(importance, ?), created_at = max(created_at, ?) "
                "WHERE rid = ?",
                (rec.importance, rec.created_at, dup[0]),
            )
            write.history(c, tenant, "update", subject, dup[1], actor, rec.created_at, "duplicate merged")
            merged = _record(dup)
            seen = max(merged.created_at, rec.created_at)
            importance = max(merged.importance, rec.importance)
            return AddResult(
                msgspec.structs.replace(merged, created_at=seen, importance=importance), duplicate=True
            )
        olds: list[MemoryRecord] = []
        if item.key is not None:
            olds = [
                _record(r)
                for r in c.execute(
                    f"SELECT {_COLS} FROM memory_records WHERE tenant = ? AND subject = ? AND kind = ? "
                    "AND key_tag = ? AND (invalid_at IS NULL OR invalid_at > ?)",
                    (tenant, subject, rec.kind, item.key, rec.valid_from),
                )
            ]
        if item.replaces:
            olds += [
                _record(r)
                for r in c.execute(
                    f"SELECT {_COLS} FROM memory_records WHERE tenant = ? AND subject = ? "
                    f"AND invalid_at IS NULL AND id IN ({_in(item.replaces)})",
                    (tenant, subject, *item.replaces),
                )
            ]
        ids, until = decide(rec, olds)
        gone = tuple(dict.fromkeys(ids))
        if until is not None:
            rec = msgspec.structs.replace(rec, invalid_at=until)
        for old_id in gone:
            c.execute(
                "UPDATE memory_records SET invalid_at = max(valid_from, ?) WHERE tenant = ? AND id = ? "
                "AND (invalid_at IS NULL OR invalid_at > ?)",
                (rec.valid_from, tenant, old_id, rec.valid_from),
            )
            write.history(c, tenant, "supersede", subject, old_id, actor, rec.created_at, f"by {rec.id}")
        c.execute(
            f"INSERT INTO memory_records (key_tag, {_COLS.removeprefix('rid, ')}) VALUES ({_in(range(18))})",
            memory_params(item.key, rec, tenant, subject, msgspec.json.encode(rec.tags).decode()),
        )
        rid = c.last_insert_rowid()
        c.execute(
            "INSERT INTO memory_fts (rowid, scope, body) VALUES (?, ?, ?)",
            (rid, subject, index_text(rec.text)),
        )
        if item.vector is not None and self._vec:
            self._ensure_vec(c, len(item.vector))
            c.execute(
                "INSERT INTO memory_vec (rowid, subject, embedding) VALUES (?, ?, ?)",
                (rid, subject, pack(item.vector)),
            )
        write.history(c, tenant, "add", subject, rec.id, actor, rec.created_at)
        return AddResult(rec, superseded=gone)

    def touch(self, tenant: str, accesses: Sequence[tuple[str, float]]) -> None:
        if not accesses:
            return

        def job(c: Conn) -> None:
            for rec_id, at in accesses:
                c.execute(
                    "UPDATE memory_records SET access_count = access_count + 1, "
                    "last_access_at = max(coalesce(last_access_at, 0), ?) WHERE tenant = ? AND id = ?",
                    (at, tenant, rec_id),
                )

        return self._write(job)

    def forget(
        self, tenant: str, keys: Sequence[str], record_id: str, now: float, actor: str, reason: str
    ) -> bool:
        return self._write(lambda c: write.forget(c, tenant, keys, record_id, now, actor, reason))

    def rebind(self, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str) -> int:
        def job(c: Conn) -> int:
            vectors = self._vec and self._vec_dim(c) is not None
            return write.rebind(c, tenant, old, new, mode, now, actor, vectors=vectors)

        return self._write(job)

    def binding_meta(self) -> tuple[str, bool]:
        def job(c: Conn) -> tuple[str, bool]:
            # made by the schema (or its migration); made here for a file that lost it
            c.execute(
                "INSERT OR IGNORE INTO memory_meta VALUES ('binding_secret', ?)", (secrets.token_hex(32),)
            )
            rows = dict(
                c.execute(
                    "SELECT name, value FROM memory_meta WHERE name IN ('binding_secret', 'binding_legacy')"
                ).fetchall()
            )
            return str(rows["binding_secret"]), rows.get("binding_legacy") == "1"

        return self._write(job)

    def migrate_key(
        self, tenant: str, old: str, new: str, legacy: dict[str, str], now: float, actor: str
    ) -> int | None:
        def job(c: Conn) -> int | None:
            vectors = self._vec and self._vec_dim(c) is not None
            return write.migrate_key(c, tenant, old, new, legacy, now, actor, vectors=vectors)

        return self._write(job)

    def register_identity(self, tenant: str, key: str, parts: dict[str, str]) -> None:
        def job(c: Conn) -> None:
            for part, h in parts.items():
                c.execute("INSERT OR IGNORE INTO memory_identity VALUES (?, ?, ?, ?)", (tenant, part, h, key))

        return self._write(job)

    def save_dictionary(self, tenant: str, groups: Sequence[Sequence[str]]) -> None:
        def job(c: Conn) -> None:
            c.execute("DELETE FROM memory_dictionary WHERE tenant = ?", (tenant,))
            for g, terms in enumerate(groups):
                for p, term in enumerate(terms):
                    c.execute("INSERT INTO memory_dictionary VALUES (?, ?, ?, ?)", (tenant, g, p, term))

        return self._write(job)

    # -- reads ----------------------------------------------------------------------------

    def load_dictionary(self, tenant: str) -> list[list[str]]:
        def job(c: Conn) -> list[list[str]]:
            groups: dict[int, list[str]] = {}
            for g, term in c.execute(
                "SELECT grp, term FROM memory_dictionary WHERE tenant = ? ORDER BY grp, pos", (tenant,)
            ):
                groups.setdefault(g, []).append(term)
            return list(groups.values())

        return self._rows.read(job)

    def keys_for_part(self, tenant: str, part: str, part_hash: str, after: str, limit: int) -> list[str]:
        def job(c: Conn) -> list[str]:
            return [
                k
                for (k,) in c.execute(
                    "SELECT key FROM memory_identity WHERE tenant = ? AND part = ? AND part_hash = ? "
                    "AND key > ? ORDER BY key LIMIT ?",
                    (tenant, part, part_hash, after, limit),
                )
            ]

        return self._rows.read(job)

    def resolve_scope(self, tenant: str, keys: Sequence[str], max_keys: int) -> list[str]:
        def job(c: Conn) -> list[str]:
            out = list(dict.fromkeys(write.resolve(c, tenant, k) for k in keys))
            linked = c.execute(
                f"SELECT other FROM memory_links WHERE tenant = ? AND key IN ({_in(out)}) "
                "ORDER BY other LIMIT ?",
                (tenant, *out, max_keys),
            ).fetchall()
            return list(dict.fromkeys([*out, *(k for (k,) in linked)]))[:max_keys]

        return self._rows.read(job)

    def candidates(
        self, tenant: str, keys: Sequence[str], search: Search
    ) -> tuple[list[Candidate], list[str]]:
        def job(c: Conn) -> tuple[list[Candidate], list[str]]:
            return memory_search.candidates(c, tenant, keys, search, self._vec, self._vec_dim(c))

        return self._rows.read(job)

    def get(
        self, tenant: str, keys: Sequence[str], ids: Sequence[str], with_vectors: bool
    ) -> list[MemoryRecord]:
        if not ids:
            return []

        def job(c: Conn) -> list[MemoryRecord]:
            rows = c.execute(
                f"SELECT {_COLS} FROM memory_records WHERE tenant = ? AND subject IN ({_in(keys)}) "
                f"AND id IN ({_in(ids)})",
                (tenant, *keys, *ids),
            ).fetchall()
            out = []
            for row in rows:
                vec = None
                if with_vectors and self._vec and self._vec_dim(c) is not None:
                    v = c.execute("SELECT embedding FROM memory_vec WHERE rowid = ?", (row[0],)).fetchone()
                    vec = unpack(v[0]) if v else None
                out.append(_record(row, vec))
            return out

        return self._rows.read(job)

    def list_records(
        self, tenant: str, keys: Sequence[str], spec: FilterSpec, now: float, before: int | None, limit: int
    ) -> tuple[list[MemoryRecord], int | None]:
        where, args = _filter(spec, now)

        def job(c: Conn) -> list[Any]:
            rows: list[Any] = c.execute(
                f"SELECT {_COLS} FROM memory_records r WHERE tenant = ? "
                f"AND subject IN ({_in(keys)}) AND {where} AND rid < ? ORDER BY rid DESC LIMIT ?",
                (tenant, *keys, *args, before if before is not None else 2**62, limit + 1),
            ).fetchall()
            return rows

        rows = self._rows.read(job)
        nxt = rows[limit - 1][0] if len(rows) > limit else None
        return [_record(r) for r in rows[:limit]], nxt

    def history(
        self, tenant: str, keys: Sequence[str], record_id: str | None, after: int, limit: int
    ) -> list[MemoryChange]:
        def job(c: Conn) -> list[Any]:
            rows: list[Any]
            if record_id is not None:
                rows = c.execute(
                    "SELECT h.seq, h.tenant, h.op, h.subject, h.record_id, h.actor, h.at, h.detail "
                    "FROM memory_history h WHERE h.record_id = ? AND h.tenant = ? AND h.seq > ? AND EXISTS ("
                    "SELECT 1 FROM memory_records r WHERE r.id = h.record_id "
                    f"AND r.subject IN ({_in(keys)})) "
                    "ORDER BY h.seq LIMIT ?",
                    (record_id, tenant, after, *keys, limit),
                ).fetchall()
            else:
                rows = c.execute(
                    "SELECT seq, tenant, op, subject, record_id, actor, at, detail FROM memory_history "
                    f"WHERE tenant = ? AND subject IN ({_in(keys)}) AND seq > ? ORDER BY seq LIMIT ?",
                    (tenant, *keys, after, limit),
                ).fetchall()
            return rows

        rows = self._rows.read(job)
        return [row_memory_change(r) for r in rows]
