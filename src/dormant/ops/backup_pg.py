"""PostgreSQL backups by ``pg_dump`` (``dormant backup --pg-dump``) and ``pg_restore``.

A dump is a logical, consistent snapshot of the store's schema (the first of the
URL's search_path; one repeatable-read transaction, writers go on). It is listed in the same manifest as
SQLite backups, as kind ``pg_dump``, and marked recoverable once ``pg_restore
--list`` reads it back whole. For point-in-time recovery use PostgreSQL's own base
backups with WAL archiving (see ``docs/backup.md``): dormant does not reinvent them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

from ..errors import NotFound, StoreError, UsageError
from .backup import Entry, _file_sha256, _save_manifest, load_manifest


def tool(name: str, bin_dir: str | None) -> str:
    """The path of the PostgreSQL client program ``name`` (from ``bin_dir``, else PATH)."""
    found = shutil.which(name, path=bin_dir) if bin_dir else shutil.which(name)
    if not found:
        where = bin_dir or "PATH"
        raise UsageError(f"{name} not found in {where}: install the PostgreSQL client or pass --pg-bin DIR")
    return found


def current_schema(url: str) -> str:
    """The schema dormant's tables live in for ``url`` (the first of its search_path)."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=30) as conn:
            row = conn.execute("SELECT current_schema()").fetchone()
    except psycopg.Error as exc:
        raise StoreError(f"cannot connect to the store: {exc}") from exc
    if row is None or row[0] is None:
        raise StoreError("the store's search_path names no existing schema")
    return str(row[0])


def _run(argv: list[str], what: str, timeout: float) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise StoreError(f"{what} did not finish within {timeout:g}s") from exc
    if done.returncode != 0:
        raise StoreError(f"{what} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout


def dump(url: str, dest: Path, *, bin_dir: str | None = None, timeout: float = 3600.0) -> Entry:
    """``pg_dump --format=custom`` of ``url`` into ``dest``, verified with ``pg_restore --list``."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(f"--pg-dump needs a postgresql:// store, not {url!r}")
    dest.mkdir(parents=True, exist_ok=True)
    entries = load_manifest(dest)
    name = f"pg-{len(entries) + 1:04d}.dump"
    target = dest / name
    schema = current_schema(url)
    argv = [tool("pg_dump", bin_dir), "--format=custom", "--schema", schema, "--file", str(target), url]
    _run(argv, "pg_dump", timeout)
    entry = Entry(
        kind="pg_dump",
        file=name,
        created_at=time.time(),
        page_size=0,
        page_count=0,
        pages_written=0,
        bytes=target.stat().st_size,
        sha256=_file_sha256(target),
        schema_version=0,
        row_counts={},
    )
    entries.append(entry)
    _save_manifest(dest, entries, "postgresql")  # the URL may hold a password: not written
    listing = _run([tool("pg_restore", bin_dir), "--list", str(target)], "pg_restore --list", timeout)
    if "schema_version" not in listing:
        entry.problems = ["the dump has no schema_version table: not a dormant database?"]
        _save_manifest(dest, entries, "postgresql")
        raise StoreError(f"{target}: {entry.problems[0]}")
    entry.recoverable = True
    entry.verified_at = time.time()
    _save_manifest(dest, entries, "postgresql")
    return entry


def restore_dump(src: Path, url: str, *, bin_dir: str | None = None, timeout: float = 3600.0) -> Entry:
    """``pg_restore --clean --if-exists`` the newest recoverable dump of ``src`` into ``url``."""
    dumps = [e for e in load_manifest(src) if e.kind == "pg_dump" and e.recoverable]
    if not dumps:
        raise NotFound(f"no recoverable pg_dump in {src}")
    entry = dumps[-1]
    path = src / entry.file
    if _file_sha256(path) != entry.sha256:
        raise StoreError(f"{path}: contents do not match the manifest (damaged?)")
    argv = [tool("pg_restore", bin_dir), "--clean", "--if-exists", "--no-owner", "--dbname", url, str(path)]
    _run(argv, "pg_restore", timeout)
    os.sync()
    return entry
