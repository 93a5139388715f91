"""The reads of the PostgreSQL store's memory rows, each on a connection inside the
transaction :class:`~dormant.store.postgres.memory.rows.PgMemoryRows` opened.

A scoped search filters by tenant and subject in the same statement as its text or
vector ranking; the structural filter (kinds, typed tags, validity) is
:func:`~dormant.store.postgres.memory.sql.filter_sql`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ....errors import StoreError, UsageError
from ....memory.backend import Search
from ....memory.fulltext import index_text
from ....memory.ranking import Candidate, FilterSpec
from ....memory.records import MemoryChange, MemoryRecord
from ...rows import row_memory_change
from ..driver import Conn
from . import sql

#: what recall says when the vector extension is missing
NO_VECTORS = "vector index unavailable (pgvector not installed): text + structure only"
#: A move chain (old key -> new key -> ...) longer than this is refused as corrupt.
MAX_MOVES = 16


async def resolve(c: Conn, tenant: str, key: str) -> str:
    """``key`` through the moves recorded for it (a moved subject's writes land on the new key)."""
    for _ in range(MAX_MOVES):
        row = await (await c.execute(sql.MOVED_TO, (tenant, key))).fetchone()
        if row is None:
            return key
        key = row[0]
    raise StoreError(f"memory move chain of {key} is longer than {MAX_MOVES}")


async def dictionary(c: Conn, tenant: str) -> list[list[str]]:
    """The tenant's synonym groups, in their order."""
    groups: dict[int, list[str]] = {}
    for g, term in await (await c.execute(sql.DICTIONARY, (tenant,))).fetchall():
        groups.setdefault(g, []).append(term)
    return list(groups.values())


async def keys_for_part(c: Conn, tenant: str, part: str, part_hash: str, after: str, limit: int) -> list[str]:
    """Keys bound with one identity part, in key order after ``after``."""
    rows = await (await c.execute(sql.KEYS_FOR_PART, (tenant, part, part_hash, after, limit))).fetchall()
    return [k for (k,) in rows]


async def scope(c: Conn, tenant: str, keys: Sequence[str], max_keys: int) -> list[str]:
    """``keys`` through moves, plus the keys explicitly linked to them (one hop)."""
    out = list(dict.fromkeys([await resolve(c, tenant, k) for k in keys]))
    linked = await (await c.execute(sql.LINKED, (tenant, out, max_keys))).fetchall()
    return list(dict.fromkeys([*out, *(k for (k,) in linked)]))[:max_keys]


async def candidates(
    c: Conn, tenant: str, keys: Sequence[str], search: Search, vectors: bool, dim: int | None
) -> tuple[list[Candidate], list[str]]:
    """Records passing the filter with their text and vector ranks; and what degraded."""
    where, args = sql.filter_sql(search.spec, search.now)
    scoped = sql.SCOPE + where
    sargs: list[Any] = [tenant, list(keys), *args]
    #: rid -> [row, text rank, text score, vector rank, vector similarity]
    found: dict[int, list[Any]] = {}
    degraded: list[str] = []
    if search.terms:
        alts = [index_text(t) for g in search.terms for t in g if t.strip()]
        if alts:
            q = " || ".join([sql.TEXT_TERM] * len(alts))
            cur = await c.execute(
                sql.TEXT_SEARCH.format(q=q, scope=scoped), (*alts, *sargs, search.text_limit)
            )
            for i, row in enumerate(await cur.fetchall(), 1):
                found[row[0]] = [row[:-1], i, float(row[-1]), None, 0.0]
    if search.vector is not None:
        if not vectors:
            degraded.append(NO_VECTORS)
        elif dim is not None:
            if dim != len(search.vector):
                raise UsageError(f"this memory holds {dim}-d vectors; the query has {len(search.vector)}-d")
            await c.execute(sql.ITERATIVE_SCAN)
            cur = await c.execute(
                sql.VECTOR_SEARCH.format(scope=scoped),
                (sql.vector_literal(search.vector), *sargs, search.vector_limit),
            )
            for i, row in enumerate(await cur.fetchall(), 1):
                entry = found.setdefault(row[0], [row[:-1], None, 0.0, None, 0.0])
                entry[3], entry[4] = i, 1.0 - float(row[-1])
    if search.terms is None and search.vector is None and search.recent_limit:
        cur = await c.execute(sql.RECENT.format(scope=scoped), (*sargs, search.recent_limit))
        for row in await cur.fetchall():
            found.setdefault(row[0], [row, None, 0.0, None, 0.0])
    return [Candidate(sql.to_record(e[0]), e[1], e[2], e[3], e[4]) for e in found.values()], degraded


async def get(
    c: Conn, tenant: str, keys: Sequence[str], ids: Sequence[str], with_vectors: bool
) -> list[MemoryRecord]:
    """The records among ``ids`` that belong to ``keys`` (with their vectors if asked)."""
    vec = ", embedding::text" if with_vectors else ""
    rows = await (await c.execute(sql.GET.format(vec=vec), (tenant, list(keys), list(ids)))).fetchall()
    out = []
    for row in rows:
        rec = sql.to_record(row)
        if with_vectors and row[-1] is not None:
            rec = msgspec.structs.replace(rec, embedding=sql.parse_vector(row[-1]))
        out.append(rec)
    return out


async def list_records(
    c: Conn, tenant: str, keys: Sequence[str], spec: FilterSpec, now: float, before: int | None, limit: int
) -> tuple[list[MemoryRecord], int | None]:
    """Newest first, ``limit`` at most, and the cursor of the next page."""
    where, args = sql.filter_sql(spec, now)
    cur = await c.execute(
        sql.LIST.format(where=where),
        (tenant, list(keys), *args, before if before is not None else 2**62, limit + 1),
    )
    rows = await cur.fetchall()
    nxt = int(rows[limit - 1][0]) if len(rows) > limit else None
    return [sql.to_record(r) for r in rows[:limit]], nxt


async def history(
    c: Conn, tenant: str, keys: Sequence[str], record_id: str | None, after: int, limit: int
) -> list[MemoryChange]:
    """Changes of the subjects (or of one of their records) after ``after``, oldest first."""
    if record_id is not None:
        cur = await c.execute(sql.HISTORY_OF_RECORD, (record_id, tenant, after, list(keys), limit))
    else:
        cur = await c.execute(sql.HISTORY_OF_SUBJECTS, (tenant, list(keys), after, limit))
    return [row_memory_change(r) for r in await cur.fetchall()]
