"""The SQLite statements of recall: a scope's candidates, ranked by text and by vector.

One read, on one connection (:meth:`SQLiteMemoryBackend.candidates
<dormant.store.sqlite.memory.rows.SQLiteMemoryBackend.candidates>` runs it):

* **Text.** A scope of at most :data:`SCOPED_TEXT_ROWS` rows after the structural
  filter (a subject's own memories) is read once and ranked by BM25 over its rows in
  Python (:mod:`~dormant.memory.bm25`, tokens from the index's own tokenizer); a
  bigger one (tenant-wide knowledge, say) is ranked by FTS5, whose ``scope AND
  terms`` walks the terms' doclists across every subject.
* **Vector.** sqlite-vec's KNN within the scope's partitions (``memory_vec`` is
  partitioned by subject; its chunks are indexed by partition,
  :data:`~dormant.store.sqlite.memory.sql.VEC_PARTITION_INDEX`). The hits' rows come
  from the scope's rows when they were read for the text ranking (the same filter),
  else from one more statement.
* **Structure only** (no text, no vector): the scope's newest rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import apsw

from ....errors import UsageError
from ....memory.backend import Search
from ....memory.bm25 import scores as bm25_scores
from ....memory.fulltext import index_text, match_expr
from ....memory.ranking import Candidate
from .sql import COLS, RCOLS, Conn, pack, scope_phrase
from .sql import filter_sql as _filter
from .sql import marks as _in
from .sql import to_record as _record

#: A scope with at most this many rows (after the structural filter) is ranked by BM25
#: over its rows in Python; a bigger one (tenant-wide knowledge, say) by FTS5.
SCOPED_TEXT_ROWS = 2000
NO_VECTORS = "vector index unavailable (sqlite-vec not loaded): text + structure only"


def candidates(
    c: Conn, tenant: str, keys: Sequence[str], search: Search, vectors: bool, dim: int | None
) -> tuple[list[Candidate], list[str]]:
    """The scope's candidates for ``search`` with their text and vector ranks, and what
    degraded. ``vectors``: sqlite-vec is loaded; ``dim``: the stored vectors' (None: none yet)."""
    where, args = _filter(search.spec, search.now)
    # rid -> [row, text rank, text score, vector rank, vector similarity]
    found: dict[int, list[Any]] = {}
    degraded: list[str] = []
    match = match_expr([list(g) for g in search.terms]) if search.terms else None
    scope_rows: dict[int, Any] | None = None
    if match is not None:
        rows = c.execute(
            f"SELECT {COLS} FROM memory_records r WHERE tenant = ? "
            f"AND subject IN ({_in(keys)}) AND {where} LIMIT ?",
            (tenant, *keys, *args, SCOPED_TEXT_ROWS + 1),
        ).fetchall()
        if len(rows) <= SCOPED_TEXT_ROWS:
            scope_rows = {row[0]: row for row in rows}
            for i, (row, score) in enumerate(scoped_text(c, rows, search), 1):
                found[row[0]] = [row, i, score, None, 0.0]
        else:
            rows = c.execute(
                f"SELECT {RCOLS}, bm25(memory_fts, 0.0, 1.0) AS s "
                "FROM memory_fts JOIN memory_records r ON r.rid = memory_fts.rowid "
                f"WHERE memory_fts MATCH ? AND r.tenant = ? AND r.subject IN ({_in(keys)}) AND {where} "
                "ORDER BY s LIMIT ?",
                (
                    f"scope : {scope_phrase(keys)} AND body : ({match})",
                    tenant,
                    *keys,
                    *args,
                    search.text_limit,
                ),
            ).fetchall()
            for i, row in enumerate(rows, 1):
                found[row[0]] = [row[:-1], i, -row[-1], None, 0.0]
    if search.vector is not None:
        if not vectors:
            degraded.append(NO_VECTORS)
        elif dim is not None and dim != len(search.vector):
            raise UsageError(f"this memory holds {dim}-d vectors; the query has {len(search.vector)}-d")
        elif dim is not None:
            hits = c.execute(
                "SELECT rowid, distance FROM memory_vec WHERE embedding MATCH ? AND k = ? "
                f"AND subject IN ({_in(keys)})",
                (pack(search.vector), search.vector_limit, *keys),
            ).fetchall()
            # a query vector without direction (all zeros: text the embedder has no feature
            # of) has no cosine distance to anything: sqlite-vec answers NULL, no hit
            dist: dict[int, float] = {rid: d for rid, d in hits if d is not None}
            if scope_rows is not None:
                rows = [scope_rows[rid] for rid in dist if rid in scope_rows]
            elif dist:
                rows = c.execute(
                    f"SELECT {COLS} FROM memory_records r WHERE rid IN ({_in(list(dist))}) "
                    f"AND tenant = ? AND subject IN ({_in(keys)}) AND {where}",
                    (*dist, tenant, *keys, *args),
                ).fetchall()
            else:
                rows = []
            rows.sort(key=lambda r: dist[r[0]])
            for i, row in enumerate(rows[: search.vector_limit], 1):
                entry = found.setdefault(row[0], [row, None, 0.0, None, 0.0])
                entry[3], entry[4] = i, 1.0 - dist[row[0]]
    if search.terms is None and search.vector is None and search.recent_limit:
        rows = c.execute(
            f"SELECT {COLS} FROM memory_records r WHERE tenant = ? "
            f"AND subject IN ({_in(keys)}) AND {where} ORDER BY created_at DESC LIMIT ?",
            (tenant, *keys, *args, search.recent_limit),
        ).fetchall()
        for row in rows:
            found.setdefault(row[0], [row, None, 0.0, None, 0.0])
    return [Candidate(_record(e[0]), e[1], e[2], e[3], e[4]) for e in found.values()], degraded


def scoped_text(c: Conn, rows: Sequence[Any], search: Search) -> list[tuple[Any, float]]:
    """The text ranking of a small scope's ``rows`` by BM25 (:mod:`~dormant.memory.bm25`),
    best first, at most ``search.text_limit``; rows without any of the terms are left out."""
    tokenize = c.fts5_tokenizer("porter", ["unicode61", "remove_diacritics", "2"])
    phrases = [
        tuple(t[2] for t in tokenize(index_text(term).strip().encode(), apsw.FTS5_TOKENIZE_QUERY, None))
        for group in search.terms or ()
        for term in group
        if term.strip()
    ]
    docs = [
        [t[2] for t in tokenize(index_text(row[5]).encode(), apsw.FTS5_TOKENIZE_DOCUMENT, None)]
        for row in rows
    ]
    ranked = [(row, s) for row, s in zip(rows, bm25_scores(docs, phrases), strict=True) if s is not None]
    ranked.sort(key=lambda pair: (-pair[1], pair[0][0]))
    return ranked[: search.text_limit]
