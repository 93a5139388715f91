"""PostgreSQL memory backend: row operations, their SQL, and the migration runner.

Full text is a ``tsvector`` column (``english`` configuration over the CJK
pre-split text) with a GIN index; vectors are a pgvector ``vector(dim)`` column
added when the first embedder claims the memory, with an HNSW index (cosine).
A scoped search filters by tenant and subject in the same statement. Without
the ``vector`` extension, :attr:`vector_available` is False and recall degrades
to text + structure.

Temporary, like the SQLite one: it opens its own connection; the statements
move into the store core's PostgreSQL backend when that lands.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from typing import Any

import msgspec
import psycopg
from psycopg.types.json import Jsonb

from ..errors import DormantError, SchemaError, StoreError, StoreFull, UsageError
from .backend import AddItem, AddResult, Decide, RebindMode, Search
from .fulltext import index_text
from .ranking import Candidate, FilterSpec
from .records import MemoryChange, MemoryRecord

Vector = tuple[float, ...]
_COLS = (
    "rid, id, tenant, subject, kind, text, tags, agent, thread, importance, source_thread, source_seq, "
    "created_at, valid_from, invalid_at, last_access_at, access_count, content_hash"
)
_MIGRATION_RE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_LOCK = "SELECT pg_advisory_xact_lock(hashtext('dormant_memory_schema'))"


def translate(exc: BaseException) -> BaseException:
    """A psycopg error as the dormant error a caller should see (others unchanged)."""
    if isinstance(exc, DormantError) or not isinstance(exc, psycopg.Error):
        return exc
    new: StoreError
    if isinstance(exc, psycopg.errors.DiskFull):
        new = StoreFull(f"the database disk is full: {exc}")
    else:
        new = StoreError(f"PostgreSQL error: {exc}")
    new.__cause__ = exc
    return new


def migrations() -> list[tuple[int, str, str]]:
    """The numbered migration files, ``(number, name, sql)``, in order."""
    folder = resources.files(__package__).joinpath("migrations/postgres")
    out = []
    for entry in folder.iterdir():
        m = _MIGRATION_RE.match(entry.name)
        if m:
            out.append((int(m.group(1)), entry.name, entry.read_text(encoding="utf-8")))
    return sorted(out)


def _vec(v: Sequence[float]) -> str:
    return "[" + ",".join(repr(float(x)) for x in v) + "]"


def _record(row: Sequence[Any]) -> MemoryRecord:
    return MemoryRecord(
        id=row[1],
        tenant=row[2],
        subject=row[3],
        kind=row[4],
        text=row[5],
        tags=dict(row[6]),
        agent=row[7],
        thread=row[8],
        importance=row[9],
        source_thread=row[10],
        source_seq=row[11],
        created_at=row[12],
        valid_from=row[13],
        invalid_at=row[14],
        last_access_at=row[15],
        access_count=row[16],
        content_hash=row[17],
    )


def _filter(spec: FilterSpec, now: float) -> tuple[str, list[Any]]:
    sql: list[str] = []
    args: list[Any] = []
    if spec.kinds:
        sql.append("kind = ANY(%s)")
        args.append(sorted(spec.kinds))
    for key, value in sorted(spec.tags.items()):
        sql.append("tags -> %s = %s::jsonb")
        args.extend([key, msgspec.json.encode(value).decode()])
    if not spec.history:
        at = spec.at if spec.at is not None else now
        sql.append("valid_from <= %s AND (invalid_at IS NULL OR invalid_at > %s)")
        args.extend([at, at])
    return (" AND ".join(sql) or "TRUE"), args


class PostgresMemoryBackend:
    """Memory rows in PostgreSQL through one psycopg connection and a lock."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._lock = threading.Lock()
        try:
            self._conn = psycopg.connect(url, autocommit=True)
            # extension objects live in public; the tables in the URL's own schema
            self._conn.execute(
                "SELECT set_config('search_path', current_setting('search_path') || ', public', false)"
            )
        except psycopg.Error as exc:
            raise translate(exc) from exc
        self._vec = self._load_vec()
        self._migrate()
        row = self._conn.execute("SELECT value FROM memory_meta WHERE name = 'vector_dim'").fetchone()
        self._dim: int | None = int(row[0]) if row else None

    def _load_vec(self) -> bool:
        for _ in range(3):
            try:
                self._conn.execute("CREATE EXTENSION IF NOT EXISTS vector SCHEMA public")
                self._conn.execute("SET hnsw.iterative_scan = relaxed_order")
                return True
            except psycopg.errors.UniqueViolation:  # another connection created it at the same moment
                continue
            except psycopg.Error:
                return False
        return False

    def _migrate(self) -> None:
        with self._write() as c:
            c.execute(_LOCK)
            c.execute(
                "CREATE TABLE IF NOT EXISTS memory_schema (version INTEGER NOT NULL, name TEXT NOT NULL)"
            )
            done = {v for (v,) in c.execute("SELECT version FROM memory_schema")}
            known = migrations()
            if done and max(done) > (known[-1][0] if known else 0):
                raise SchemaError(f"memory schema version {max(done)} is newer than this runtime")
            for number, name, sql in known:
                if number not in done:
                    c.execute(sql)
                    c.execute("INSERT INTO memory_schema VALUES (%s, %s)", (number, name))

    @contextmanager
    def _write(self) -> Iterator[psycopg.Connection[Any]]:
        with self._lock:
            try:
                with self._conn.transaction():
                    yield self._conn
            except psycopg.Error as exc:
                raise translate(exc) from exc

    _read = _write

    @property
    def vector_available(self) -> bool:
        return self._vec

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def check_embedder(self, name: str, dim: int) -> None:
        with self._write() as c:
            c.execute(_LOCK)
            row = c.execute("SELECT value FROM memory_meta WHERE name = 'embedder'").fetchone()
            if row is None:
                c.execute("INSERT INTO memory_meta VALUES ('embedder', %s)", (f"{name}/{dim}",))
            elif row[0] != f"{name}/{dim}":
                raise UsageError(f"this memory's vectors were made by {row[0]}, not {name}/{dim}")
            if self._vec and self._dim is None:
                c.execute(f"ALTER TABLE memory_records ADD COLUMN IF NOT EXISTS embedding vector({int(dim)})")
                c.execute(
                    "CREATE INDEX IF NOT EXISTS memory_records_vec ON memory_records "
                    "USING hnsw (embedding vector_cosine_ops)"
                )
                c.execute(
                    "INSERT INTO memory_meta VALUES ('vector_dim', %s) ON CONFLICT DO NOTHING", (str(dim),)
                )
                self._dim = dim

    # -- writes ---------------------------------------------------------------------------

    def _resolve(self, c: psycopg.Connection[Any], tenant: str, key: str) -> str:
        for _ in range(16):
            row = c.execute(
                "SELECT new_key FROM memory_moves WHERE tenant = %s AND old_key = %s", (tenant, key)
            ).fetchone()
            if row is None:
                return key
            key = row[0]
        raise StoreError(f"memory move chain of {key} is longer than 16")

    def _history(
        self,
        c: psycopg.Connection[Any],
        tenant: str,
        op: str,
        subject: str,
        rec: str | None,
        actor: str,
        at: float,
        detail: str = "",
    ) -> None:
        c.execute(
            "INSERT INTO memory_history (tenant, op, subject, record_id, actor, at, detail) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            (tenant, op, subject, rec, actor, at, detail),
        )

    def add_many(self, tenant: str, items: Sequence[AddItem], decide: Decide, actor: str) -> list[AddResult]:
        with self._write() as c:
            # one subject's adds are serialized (dedup and supersession read-then-write)
            for subject in sorted({i.record.subject for i in items}):
                c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{tenant}/{subject}",))
            return [self._add(c, tenant, item, decide, actor) for item in items]

    def _add(
        self, c: psycopg.Connection[Any], tenant: str, item: AddItem, decide: Decide, actor: str
    ) -> AddResult:
        rec = item.record
        subject = self._resolve(c, tenant, rec.subject)
        if subject != rec.subject:
            rec = msgspec.structs.replace(rec, subject=subject)
        dup = c.execute(
            f"SELECT {_COLS} FROM memory_records WHERE tenant = %s AND subject = %s AND content_hash = %s "
            "AND invalid_at IS NULL",
            (tenant, subject, rec.content_hash),
        ).fetchone()
        if dup is not None:
            c.execute(
                "UPDATE memory_records SET importance = greatest(importance, %s) WHERE rid = %s",
                (rec.importance, dup[0]),
            )
            self._history(c, tenant, "update", subject, dup[1], actor, rec.created_at, "duplicate merged")
            return AddResult(_record(dup), duplicate=True)
        olds: list[MemoryRecord] = []
        if item.key is not None:
            olds = [
                _record(r)
                for r in c.execute(
                    f"SELECT {_COLS} FROM memory_records WHERE tenant = %s AND subject = %s AND kind = %s "
                    "AND key_tag = %s AND invalid_at IS NULL",
                    (tenant, subject, rec.kind, item.key),
                )
            ]
        if item.replaces:
            olds += [
                _record(r)
                for r in c.execute(
                    f"SELECT {_COLS} FROM memory_records WHERE tenant = %s AND subject = %s "
                    "AND invalid_at IS NULL "
                    "AND id = ANY(%s)",
                    (tenant, subject, list(item.replaces)),
                )
            ]
        gone = tuple(dict.fromkeys(decide(rec, olds)))
        for old_id in gone:
            c.execute(
                "UPDATE memory_records SET invalid_at = greatest(valid_from, %s) "
                "WHERE tenant = %s AND id = %s "
                "AND invalid_at IS NULL",
                (rec.valid_from, tenant, old_id),
            )
            self._history(c, tenant, "supersede", subject, old_id, actor, rec.created_at, f"by {rec.id}")
        vec_col, vec_val = (
            ("", ()) if item.vector is None or self._dim is None else (", embedding", (_vec(item.vector),))
        )
        c.execute(
            f"INSERT INTO memory_records (key_tag, {_COLS.removeprefix('rid, ')}, fts{vec_col}) VALUES "
            f"({', '.join(['%s'] * 18)}, to_tsvector('english', %s){', %s::vector' if vec_col else ''})",
            (
                item.key,
                rec.id,
                tenant,
                subject,
                rec.kind,
                rec.text,
                Jsonb(rec.tags),
                rec.agent,
                rec.thread,
                rec.importance,
                rec.source_thread,
                rec.source_seq,
                rec.created_at,
                rec.valid_from,
                rec.invalid_at,
                rec.last_access_at,
                rec.access_count,
                rec.content_hash,
                index_text(rec.text),
                *vec_val,
            ),
        )
        self._history(c, tenant, "add", subject, rec.id, actor, rec.created_at)
        return AddResult(rec, superseded=gone)

    def touch(self, tenant: str, accesses: Sequence[tuple[str, float]]) -> None:
        if not accesses:
            return
        with self._write() as c:
            for rec_id, at in accesses:
                c.execute(
                    "UPDATE memory_records SET access_count = access_count + 1, "
                    "last_access_at = greatest(coalesce(last_access_at, 0), %s) "
                    "WHERE tenant = %s AND id = %s",
                    (at, tenant, rec_id),
                )

    def forget(
        self, tenant: str, keys: Sequence[str], record_id: str, now: float, actor: str, reason: str
    ) -> bool:
        with self._write() as c:
            row = c.execute(
                "UPDATE memory_records SET invalid_at = greatest(valid_from, %s) "
                "WHERE tenant = %s AND id = %s "
                "AND subject = ANY(%s) AND invalid_at IS NULL RETURNING subject",
                (now, tenant, record_id, list(keys)),
            ).fetchone()
            if row is None:
                return False
            self._history(c, tenant, "forget", row[0], record_id, actor, now, reason)
            return True

    def rebind(self, tenant: str, old: str, new: str, mode: RebindMode, now: float, actor: str) -> int:
        with self._write() as c:
            for key in sorted((old, new)):
                c.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"{tenant}/{key}",))
            if mode in ("link", "unlink"):
                changed = 0
                for x, y in ((old, new), (new, old)):
                    if mode == "link":
                        cur = c.execute(
                            "INSERT INTO memory_links VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                            (tenant, x, y, now),
                        )
                    else:
                        cur = c.execute(
                            "DELETE FROM memory_links WHERE tenant = %s AND key = %s AND other = %s",
                            (tenant, x, y),
                        )
                    changed += cur.rowcount
                if changed:
                    self._history(c, tenant, mode, old, None, actor, now, f"{old} <-> {new}")
                return changed // 2
            new = self._resolve(c, tenant, new)
            if new == old:
                raise UsageError("cannot move a subject onto itself")
            op = "merge" if mode == "merge" else "rebind"
            for a_id, b_id in c.execute(
                "SELECT a.id, b.id FROM memory_records a JOIN memory_records b ON b.tenant = a.tenant "
                "AND b.subject = %s AND b.content_hash = a.content_hash AND b.invalid_at IS NULL "
                "WHERE a.tenant = %s AND a.subject = %s AND a.invalid_at IS NULL",
                (new, tenant, old),
            ).fetchall():
                c.execute(
                    "UPDATE memory_records SET invalid_at = greatest(valid_from, %s) "
                    "WHERE tenant = %s AND id = %s",
                    (now, tenant, a_id),
                )
                self._history(c, tenant, "merge", old, a_id, actor, now, f"duplicate of {b_id}")
            moved = c.execute(
                "UPDATE memory_records SET subject = %s WHERE tenant = %s AND subject = %s RETURNING id",
                (new, tenant, old),
            ).fetchall()
            for (rec_id,) in moved:
                self._history(c, tenant, op, new, rec_id, actor, now, f"{old} -> {new}")
            if not moved:
                self._history(c, tenant, op, new, None, actor, now, f"{old} -> {new}")
            c.execute(
                "UPDATE memory_moves SET new_key = %s WHERE tenant = %s AND new_key = %s", (new, tenant, old)
            )
            c.execute(
                "INSERT INTO memory_moves VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, old_key) "
                "DO UPDATE SET new_key = EXCLUDED.new_key, moved_at = EXCLUDED.moved_at",
                (tenant, old, new, now),
            )
            c.execute(
                "UPDATE memory_identity SET key = %s WHERE tenant = %s AND key = %s AND NOT EXISTS ("
                "SELECT 1 FROM memory_identity i WHERE i.tenant = memory_identity.tenant AND i.part = "
                "memory_identity.part AND i.part_hash = memory_identity.part_hash AND i.key = %s)",
                (new, tenant, old, new),
            )
            return len(moved)

    def register_identity(self, tenant: str, key: str, parts: dict[str, str]) -> None:
        with self._write() as c:
            for part, h in parts.items():
                c.execute(
                    "INSERT INTO memory_identity VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (tenant, part, h, key),
                )

    def save_dictionary(self, tenant: str, groups: Sequence[Sequence[str]]) -> None:
        with self._write() as c:
            c.execute("DELETE FROM memory_dictionary WHERE tenant = %s", (tenant,))
            for g, terms in enumerate(groups):
                for p, term in enumerate(terms):
                    c.execute("INSERT INTO memory_dictionary VALUES (%s, %s, %s, %s)", (tenant, g, p, term))

    # -- reads ----------------------------------------------------------------------------

    def load_dictionary(self, tenant: str) -> list[list[str]]:
        groups: dict[int, list[str]] = {}
        with self._read() as c:
            for g, term in c.execute(
                "SELECT grp, term FROM memory_dictionary WHERE tenant = %s ORDER BY grp, pos", (tenant,)
            ):
                groups.setdefault(g, []).append(term)
        return list(groups.values())

    def keys_for_part(self, tenant: str, part: str, part_hash: str, after: str, limit: int) -> list[str]:
        with self._read() as c:
            return [
                k
                for (k,) in c.execute(
                    "SELECT key FROM memory_identity WHERE tenant = %s AND part = %s AND part_hash = %s "
                    "AND key > %s "
                    "ORDER BY key LIMIT %s",
                    (tenant, part, part_hash, after, limit),
                )
            ]

    def resolve_scope(self, tenant: str, keys: Sequence[str], max_keys: int) -> list[str]:
        with self._read() as c:
            out = list(dict.fromkeys(self._resolve(c, tenant, k) for k in keys))
            linked = c.execute(
                "SELECT other FROM memory_links WHERE tenant = %s AND key = ANY(%s) ORDER BY other LIMIT %s",
                (tenant, out, max_keys),
            ).fetchall()
        return list(dict.fromkeys([*out, *(k for (k,) in linked)]))[:max_keys]

    def candidates(
        self, tenant: str, keys: Sequence[str], search: Search
    ) -> tuple[list[Candidate], list[str]]:
        where, args = _filter(search.spec, search.now)
        scope = "tenant = %s AND subject = ANY(%s) AND " + where
        sargs = [tenant, list(keys), *args]
        found: dict[int, list[Any]] = {}
        degraded: list[str] = []
        with self._read() as c:
            if search.terms:
                alts = [t for g in search.terms for t in g if t.strip()]
                q = " || ".join(["phraseto_tsquery('english', %s)"] * len(alts))
                rows = c.execute(
                    f"SELECT {_COLS}, ts_rank_cd(fts, q) AS s FROM memory_records, ({'SELECT ' + q} AS q) qq "
                    f"WHERE fts @@ q AND {scope} ORDER BY s DESC, rid LIMIT %s",
                    (*[index_text(a) for a in alts], *sargs, search.text_limit),
                ).fetchall()
                for i, row in enumerate(rows, 1):
                    found[row[0]] = [row[:-1], i, float(row[-1]), None, 0.0]
            if search.vector is not None:
                if not self._vec:
                    degraded.append(
                        "vector index unavailable (pgvector not installed): text + structure only"
                    )
                elif self._dim is not None:
                    if self._dim != len(search.vector):
                        raise UsageError(
                            f"this memory holds {self._dim}-d vectors; the query has {len(search.vector)}-d"
                        )
                    rows = c.execute(
                        f"SELECT {_COLS}, embedding <=> %s::vector AS d FROM memory_records "
                        f"WHERE embedding IS NOT NULL AND {scope} ORDER BY d LIMIT %s",
                        (_vec(search.vector), *sargs, search.vector_limit),
                    ).fetchall()
                    for i, row in enumerate(rows, 1):
                        entry = found.setdefault(row[0], [row[:-1], None, 0.0, None, 0.0])
                        entry[3], entry[4] = i, 1.0 - float(row[-1])
            if search.terms is None and search.vector is None and search.recent_limit:
                for row in c.execute(
                    f"SELECT {_COLS} FROM memory_records WHERE {scope} ORDER BY created_at DESC LIMIT %s",
                    (*sargs, search.recent_limit),
                ):
                    found.setdefault(row[0], [row, None, 0.0, None, 0.0])
        return [Candidate(_record(e[0]), e[1], e[2], e[3], e[4]) for e in found.values()], degraded

    def get(
        self, tenant: str, keys: Sequence[str], ids: Sequence[str], with_vectors: bool
    ) -> list[MemoryRecord]:
        if not ids:
            return []
        vec = ", embedding::text" if with_vectors and self._dim is not None else ""
        with self._read() as c:
            rows = c.execute(
                f"SELECT {_COLS}{vec} FROM memory_records WHERE tenant = %s AND subject = ANY(%s) "
                "AND id = ANY(%s)",
                (tenant, list(keys), list(ids)),
            ).fetchall()
        out = []
        for row in rows:
            r = _record(row)
            if vec and row[-1] is not None:
                r = msgspec.structs.replace(
                    r, embedding=tuple(float(x) for x in row[-1].strip("[]").split(","))
                )
            out.append(r)
        return out

    def list_records(
        self, tenant: str, keys: Sequence[str], spec: FilterSpec, now: float, before: int | None, limit: int
    ) -> tuple[list[MemoryRecord], int | None]:
        where, args = _filter(spec, now)
        with self._read() as c:
            rows = c.execute(
                f"SELECT {_COLS} FROM memory_records WHERE tenant = %s AND subject = ANY(%s) AND {where} "
                "AND rid < %s ORDER BY rid DESC LIMIT %s",
                (tenant, list(keys), *args, before if before is not None else 2**62, limit + 1),
            ).fetchall()
        nxt = int(rows[limit - 1][0]) if len(rows) > limit else None
        return [_record(r) for r in rows[:limit]], nxt

    def history(
        self, tenant: str, keys: Sequence[str], record_id: str | None, after: int, limit: int
    ) -> list[MemoryChange]:
        cols = "h.seq, h.tenant, h.op, h.subject, h.record_id, h.actor, h.at, h.detail"
        with self._read() as c:
            if record_id is not None:
                rows = c.execute(
                    f"SELECT {cols} FROM memory_history h WHERE h.record_id = %s AND h.tenant = %s "
                    "AND h.seq > %s "
                    "AND EXISTS (SELECT 1 FROM memory_records r WHERE r.id = h.record_id "
                    "AND r.subject = ANY(%s)) "
                    "ORDER BY h.seq LIMIT %s",
                    (record_id, tenant, after, list(keys), limit),
                ).fetchall()
            else:
                rows = c.execute(
                    f"SELECT {cols} FROM memory_history h WHERE h.tenant = %s AND h.subject = ANY(%s) "
                    "AND h.seq > %s "
                    "ORDER BY h.seq LIMIT %s",
                    (tenant, list(keys), after, limit),
                ).fetchall()
        return [
            MemoryChange(
                seq=r[0], tenant=r[1], op=r[2], subject=r[3], record_id=r[4], actor=r[5], at=r[6], detail=r[7]
            )
            for r in rows
        ]
