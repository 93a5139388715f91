"""SQLite memory rows: record conversion, the structural filter as SQL, vector blobs.

The statements of each operation are in :mod:`~dormant.store.sqlite.memory.rows`; this
module holds what they share. Driver errors are translated by the store's
:func:`~dormant.store.sqlite.connect.translate`.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

import msgspec

from ....memory.ranking import FilterSpec
from ....memory.records import MemoryRecord
from ...rows import row_memory

Vector = tuple[float, ...]
#: apsw rows are untyped; the converters below give them types
Conn = Any
COLS = (
    "rid, id, tenant, subject, kind, text, tags, agent, thread, importance, source_thread, source_seq, "
    "created_at, valid_from, invalid_at, last_access_at, access_count, content_hash"
)
#: vectors per vec0 chunk. A partition (a subject) takes whole chunks: the default 1024
#: costs 1.5 MB per subject at 384-d; 8 keeps a one-record subject at 12 KB, and a
#: scoped KNN reads a few chunks (measured: 0.8 ms at 20 records per subject).
VEC_CHUNK = 8
#: sqlite-vec (0.1.x) finds a partition's chunks with ``WHERE partition00 = ?`` on its
#: chunks table, which has no index: every scoped KNN scanned the chunk rows of all
#: subjects (measured: 2 ms at 100k records, growing with the table). This index makes
#: it a lookup (0.27 ms at 100k). It lives on the extension's shadow table, so it is
#: made with the table (``memory_vec`` is created on the first vector) and, for a file
#: made before it, when the store opens.
VEC_PARTITION_INDEX = (
    "CREATE INDEX IF NOT EXISTS memory_vec_chunks_partition ON memory_vec_chunks(partition00)"
)
RCOLS = ", ".join("r." + x.strip() for x in COLS.split(","))
_decode_tags = msgspec.json.Decoder(dict[str, str | int | float | bool])


def pack(vec: Sequence[float]) -> bytes:
    """A vector as sqlite-vec's float32 blob."""
    return struct.pack(f"{len(vec)}f", *vec)


def unpack(blob: bytes) -> Vector:
    """A float32 blob as a vector."""
    return struct.unpack(f"{len(blob) // 4}f", blob)


def to_record(row: Sequence[Any], vector: Vector | None = None) -> MemoryRecord:
    """A ``COLS`` row as a record (with ``vector`` as its embedding, when read)."""
    return row_memory(row, _decode_tags.decode(row[6]), vector)


def filter_sql(spec: FilterSpec, now: float, alias: str = "r") -> tuple[str, list[Any]]:
    """The structural filter as a WHERE fragment (tag keys are validated identifiers)."""
    sql: list[str] = []
    args: list[Any] = []
    if spec.kinds:
        sql.append(f"{alias}.kind IN ({','.join('?' * len(spec.kinds))})")
        args.extend(sorted(spec.kinds))
    for key, value in sorted(spec.tags.items()):
        path = f"'$.{key}'"
        if isinstance(value, bool):
            sql.append(f"json_type({alias}.tags, {path}) = ?")
            args.append("true" if value else "false")
            continue
        jtype = "text" if isinstance(value, str) else "integer" if isinstance(value, int) else "real"
        sql.append(f"json_type({alias}.tags, {path}) = ? AND json_extract({alias}.tags, {path}) = ?")
        args.extend([jtype, value])
    if not spec.history:
        at = spec.at if spec.at is not None else now
        sql.append(f"{alias}.valid_from <= ? AND ({alias}.invalid_at IS NULL OR {alias}.invalid_at > ?)")
        args.extend([at, at])
    return (" AND ".join(sql) or "1"), args


def marks(keys: Sequence[object]) -> str:
    return ",".join("?" * len(keys))


def scope_phrase(keys: Sequence[str]) -> str:
    return "(" + " OR ".join(f'"{k}"' for k in keys) + ")"
