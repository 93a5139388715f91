"""Online backups of a SQLite store: a base snapshot plus page-level increments.

A backup directory holds ``manifest.json`` and the files it lists:

- a **base** (``base-0001.db``): a consistent copy of the store taken with SQLite's
  online backup API (apsw) while the store runs. ``step(-1)`` copies every page in
  one read transaction: in WAL mode writers go on meanwhile, and the copy is the
  database as of one commit.
- **increments** (``incr-0002.pages``): the pages that changed since the newest
  recoverable entry. An increment also starts with an online snapshot (into a
  scratch file beside the backup, deleted after), then keeps only the pages whose
  hash differs from the previous state (``pages.hash`` keeps 16 bytes of BLAKE2b a
  page): it costs one full read of the database and stores only what changed. Its
  file is zlib-compressed ``(page number, page bytes)`` records, plus the page count
  (a database that shrank is truncated on restore).

Each entry is written to the manifest first as not recoverable, then verified: the
chain up to it is rebuilt into a scratch file, which must pass ``PRAGMA
integrity_check``, have the snapshot's schema version and the snapshot's row count
in every table, and hash to the page hashes the entry recorded. Only then is it
marked ``recoverable`` (and ``pages.hash`` replaced). :func:`restore` rebuilds the
newest recoverable state (or an earlier one), verifies it the same way, and moves
it into place atomically; it refuses to overwrite an existing database unless told.

Memory is bounded: pages are streamed one at a time; only the page hashes of the
database (16 bytes a page: 1 MiB for a 1 GiB store of 16 KiB pages) are held.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import apsw

from ..errors import InvalidInput, NotFound, StoreError, UsageError

MANIFEST = "manifest.json"
HASHES = "pages.hash"
FORMAT = 1
HASH_BYTES = 16
_RECORD = struct.Struct(">I")  # page number before each page of an increment


@dataclass(slots=True, kw_only=True)
class Entry:
    """One file of a backup chain, as listed in the manifest."""

    kind: str  # "base" or "increment"
    file: str
    created_at: float
    page_size: int
    page_count: int
    pages_written: int
    bytes: int
    sha256: str
    schema_version: int
    row_counts: dict[str, int]
    recoverable: bool = False
    verified_at: float | None = None
    problems: list[str] = field(default_factory=list)


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///path`` URL (``sqlite:////abs`` for an absolute path)."""
    if not url.startswith("sqlite:///") or url.endswith("/"):
        raise UsageError(f"backups of this kind need a SQLite URL (sqlite:///path.db), not {url!r}")
    return Path(url[len("sqlite:///") :])


def load_manifest(dest: Path) -> list[Entry]:
    """The entries of the backup in ``dest`` (empty if there is none yet)."""
    path = dest / MANIFEST
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    if data.get("format") != FORMAT:
        raise InvalidInput(f"{path}: unknown backup format {data.get('format')!r}")
    return [Entry(**entry) for entry in data["entries"]]


def _save_manifest(dest: Path, entries: list[Entry], source: str) -> None:
    tmp = dest / (MANIFEST + ".tmp")
    body = {"format": FORMAT, "source": source, "entries": [asdict(e) for e in entries]}
    tmp.write_text(json.dumps(body, indent=2))
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    tmp.replace(dest / MANIFEST)


def snapshot(source: Path, target: Path) -> None:
    """Copy the live database ``source`` into ``target`` with the online backup API."""
    if not source.exists():
        raise NotFound(f"no database at {source}")
    with contextlib.suppress(FileNotFoundError):
        target.unlink()
    try:
        src = apsw.Connection(str(source), flags=apsw.SQLITE_OPEN_READONLY)
        src.setbusytimeout(10_000)
        dst = apsw.Connection(str(target))
        try:
            with dst.backup("main", src, "main") as backup:
                backup.step(-1)  # all pages in one read transaction: one consistent commit
            # a copy in rollback-journal mode opens read-only without -wal/-shm files beside it
            dst.execute("PRAGMA journal_mode=DELETE")
        finally:
            dst.close()
            src.close()
    except apsw.Error as exc:
        raise StoreError(f"online backup of {source} failed: {exc}") from exc


def _pages(path: Path, page_size: int) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as handle:
        number = 0
        while page := handle.read(page_size):
            number += 1
            yield number, page


def _hash(page: bytes) -> bytes:
    return hashlib.blake2b(page, digest_size=HASH_BYTES).digest()


def _one(conn: apsw.Connection, sql: str) -> int:
    row = conn.execute(sql).fetchone()
    assert row is not None  # PRAGMA and COUNT(*) always answer one row
    return int(row[0])


def describe(path: Path) -> tuple[int, int, int, dict[str, int]]:
    """Page size, page count, schema version and row count per table of the database ``path``;
    raises :class:`StoreError` unless ``PRAGMA integrity_check`` says ok."""
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check(20)")]
            if problems != ["ok"]:
                raise StoreError(f"{path}: integrity check failed: {'; '.join(map(str, problems))}")
            page_size = _one(conn, "PRAGMA page_size")
            page_count = _one(conn, "PRAGMA page_count")
            tables = [
                row[0]
                for row in conn.execute(
                    "SELECT name FROM sqlite_schema WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                    "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%' ORDER BY name"
                )
            ]
            counts = {t: _one(conn, f'SELECT COUNT(*) FROM "{t}"') for t in tables}
            version = 0
            if "schema_version" in counts:
                row = conn.execute("SELECT version FROM schema_version").fetchone()
                version = row[0] if row else 0
        finally:
            conn.close()
    except apsw.Error as exc:
        raise StoreError(f"{path}: not a readable database: {exc}") from exc
    return page_size, page_count, version, counts


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_increment(snap: Path, out: Path, page_size: int, old: bytes) -> tuple[int, bytes]:
    """Write the pages of ``snap`` whose hash differs from ``old``; return (pages, new hashes)."""
    hashes = bytearray()
    written = 0
    packer = zlib.compressobj(6)
    with open(out, "wb") as handle:
        for number, page in _pages(snap, page_size):
            digest = _hash(page)
            hashes += digest
            start = (number - 1) * HASH_BYTES
            if old[start : start + HASH_BYTES] != digest:
                handle.write(packer.compress(_RECORD.pack(number) + page))
                written += 1
        handle.write(packer.flush())
        handle.flush()
        os.fsync(handle.fileno())
    return written, bytes(hashes)


def _records(path: Path, size: int) -> Iterator[bytes]:
    """The ``size``-byte records of the compressed file ``path``, decompressed a bounded
    amount at a time (a page of zeros compresses a thousandfold)."""
    unpacker = zlib.decompressobj()
    buffered = bytearray()
    with open(path, "rb") as source:
        pending = b""
        while True:
            if not pending:
                pending = source.read(1 << 16)
                if not pending:
                    break
            buffered += unpacker.decompress(pending, 64 * size)
            pending = unpacker.unconsumed_tail
            while len(buffered) >= size:
                yield bytes(buffered[:size])
                del buffered[:size]
    buffered += unpacker.flush()
    while len(buffered) >= size:
        yield bytes(buffered[:size])
        del buffered[:size]
    if buffered or not unpacker.eof:
        raise StoreError(f"{path}: truncated increment")


def _apply_increment(path: Path, target: Path, entry: Entry) -> None:
    with open(target, "r+b") as handle:
        for record in _records(path, _RECORD.size + entry.page_size):
            (number,) = _RECORD.unpack_from(record)
            handle.seek((number - 1) * entry.page_size)
            handle.write(record[_RECORD.size :])
        handle.truncate(entry.page_count * entry.page_size)


def rebuild(dest: Path, entries: list[Entry], upto: int, target: Path) -> Entry:
    """Rebuild into ``target`` the state of entry ``upto`` (its base plus the recoverable
    increments up to it); returns that entry. Files are checked against their sha256."""
    chosen = entries[upto]
    base = max(i for i in range(upto + 1) if entries[i].kind == "base")
    chain = [entries[base]] + [e for e in entries[base + 1 : upto] if e.recoverable] + [chosen]
    if upto == base:
        chain = [chosen]
    for entry in chain:
        if _file_sha256(dest / entry.file) != entry.sha256:
            raise StoreError(f"{dest / entry.file}: contents do not match the manifest (damaged?)")
    with open(dest / chain[0].file, "rb") as source, open(target, "wb") as handle:
        while chunk := source.read(1 << 20):
            handle.write(chunk)
    for entry in chain[1:]:
        _apply_increment(dest / entry.file, target, entry)
    with open(target, "rb+") as handle:
        os.fsync(handle.fileno())
    return chosen


def _verify(dest: Path, entries: list[Entry], index: int, hashes: bytes) -> list[str]:
    """Rebuild entry ``index`` into a scratch file and compare it with what was recorded."""
    entry = entries[index]
    scratch = dest / f".verify-{os.getpid()}.db"
    problems: list[str] = []
    try:
        rebuild(dest, entries, index, scratch)
        rebuilt = b"".join(_hash(page) for _, page in _pages(scratch, entry.page_size))
        if rebuilt != hashes:
            problems.append("the rebuilt pages differ from the snapshot's")
        _, pages, version, counts = describe(scratch)
        if pages != entry.page_count:
            problems.append(f"page count {pages}, snapshot had {entry.page_count}")
        if version != entry.schema_version:
            problems.append(f"schema version {version}, snapshot had {entry.schema_version}")
        if counts != entry.row_counts:
            problems.append(f"row counts {counts}, snapshot had {entry.row_counts}")
    except (StoreError, OSError) as exc:
        problems.append(str(exc))
    finally:
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{scratch}{suffix}").unlink()
    return problems


def backup(url: str, dest: Path, *, incremental: bool = False) -> Entry:
    """Back up the SQLite store ``url`` into the directory ``dest``; return the new entry.

    ``incremental``: only the pages changed since the newest recoverable entry (a full
    base when there is none yet). The entry is recoverable only once verified; a
    failed verification raises :class:`StoreError` (the entry stays listed, marked not
    recoverable, with its problems).
    """
    source = sqlite_path(url)
    dest.mkdir(parents=True, exist_ok=True)
    entries = load_manifest(dest)
    recoverable = [e for e in entries if e.recoverable]
    kind = "increment" if incremental and recoverable else "base"
    number = len(entries) + 1
    name = f"base-{number:04d}.db" if kind == "base" else f"incr-{number:04d}.pages"
    snap = dest / (name if kind == "base" else f".snapshot-{os.getpid()}.db")
    try:
        snapshot(source, snap)
        page_size, page_count, version, counts = describe(snap)
        if kind == "base":
            hashes = b"".join(_hash(page) for _, page in _pages(snap, page_size))
            written = page_count
        else:
            if page_size != recoverable[-1].page_size:
                raise StoreError("the page size changed since the last backup: take a full one")
            old = (dest / HASHES).read_bytes()
            written, hashes = _write_increment(snap, dest / name, page_size, old)
    finally:
        if kind == "increment":
            with contextlib.suppress(FileNotFoundError):
                snap.unlink()
    entry = Entry(
        kind=kind,
        file=name,
        created_at=time.time(),
        page_size=page_size,
        page_count=page_count,
        pages_written=written,
        bytes=(dest / name).stat().st_size,
        sha256=_file_sha256(dest / name),
        schema_version=version,
        row_counts=counts,
    )
    entries.append(entry)
    _save_manifest(dest, entries, url)  # listed, not yet recoverable
    entry.problems = _verify(dest, entries, len(entries) - 1, hashes)
    if entry.problems:
        _save_manifest(dest, entries, url)
        raise StoreError(f"backup {dest / name} failed verification: {'; '.join(entry.problems)}")
    tmp = dest / (HASHES + ".tmp")
    tmp.write_bytes(hashes)
    tmp.replace(dest / HASHES)
    entry.recoverable = True
    entry.verified_at = time.time()
    _save_manifest(dest, entries, url)
    return entry


def restore(src: Path, url: str, *, at: int | None = None, force: bool = False) -> Entry:
    """Restore the backup in ``src`` into the SQLite store ``url``: the newest recoverable
    entry, or entry number ``at`` (1-based, must be recoverable). Refuses to replace an
    existing database unless ``force``; never run it while a process uses the store."""
    target = sqlite_path(url)
    entries = load_manifest(src)
    if not entries:
        raise NotFound(f"no backup in {src} (no {MANIFEST})")
    if at is None:
        candidates = [i for i, e in enumerate(entries) if e.recoverable]
        if not candidates:
            raise StoreError(f"{src}: no entry is marked recoverable")
        index = candidates[-1]
    else:
        index = at - 1
        if not 0 <= index < len(entries) or not entries[index].recoverable:
            raise InvalidInput(f"{src}: entry {at} does not exist or is not recoverable")
    if target.exists() and not force:
        raise UsageError(f"{target} exists: stop every process using it, then pass --force to replace it")
    target.parent.mkdir(parents=True, exist_ok=True)
    scratch = target.with_name(f".{target.name}.restoring-{os.getpid()}")
    try:
        entry = rebuild(src, entries, index, scratch)
        _, pages, version, counts = describe(scratch)
        if (pages, version, counts) != (entry.page_count, entry.schema_version, entry.row_counts):
            raise StoreError(f"the restored database does not match entry {index + 1} of {src}")
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                Path(f"{target}{suffix}").unlink()
        scratch.replace(target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            scratch.unlink()
    return entry


def as_dict(entry: Entry) -> dict[str, Any]:
    """An entry as plain data (for ``--json`` output)."""
    return asdict(entry)
