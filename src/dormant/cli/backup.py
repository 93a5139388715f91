"""``dormant backup`` and ``dormant restore`` (the logic is in :mod:`dormant.ops.backup`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import DormantError, UsageError
from ..ops.backup import Entry
from ..ops.backup import backup as sqlite_backup
from ..ops.backup import restore as sqlite_restore
from .base import StoreOpt, fail, out, settings_for

PgBinOpt = Annotated[
    str | None,
    typer.Option(
        "--pg-bin",
        envvar="DORMANT_PG_BIN",
        help="Directory of pg_dump / pg_restore (default: PATH); at least the server's version.",
    ),
]


def _say(verb: str, entry: Entry, where: Path | str) -> None:
    counts = ", ".join(f"{k} {v:,}" for k, v in sorted(entry.row_counts.items()) if v)
    out.print(
        f"{verb} {entry.kind} {entry.file} ({entry.bytes:,} bytes, {entry.pages_written:,} of "
        f"{entry.page_count:,} pages; schema {entry.schema_version}; recoverable) {where}"
    )
    if counts:
        out.print(f"rows: {counts}")


def backup(
    dest: Annotated[Path, typer.Argument(help="Backup directory (created; holds manifest.json).")],
    store: StoreOpt = DEFAULT_STORE,
    incremental: Annotated[
        bool,
        typer.Option(
            "--incremental",
            envvar="DORMANT_BACKUP_INCREMENTAL",
            help="Only the pages changed since the last recoverable backup in DEST (a full one if none).",
        ),
    ] = False,
    pg_dump: Annotated[
        bool,
        typer.Option("--pg-dump", envvar="DORMANT_BACKUP_PG_DUMP", help="PostgreSQL: run pg_dump."),
    ] = False,
    pg_bin: PgBinOpt = None,
) -> None:
    """Back up the store while it runs: a verified snapshot (SQLite online backup), marked
    recoverable only after a trial restore passes integrity, schema and row-count checks."""
    url = settings_for(store).store
    try:
        if url.startswith(("postgresql://", "postgres://")):
            if not pg_dump:
                raise UsageError(
                    "PostgreSQL: pass --pg-dump for a logical dump, or use base backups with WAL "
                    "archiving (docs/backup.md)"
                )
            from ..ops.backup_pg import dump

            entry = dump(url, dest, bin_dir=pg_bin)
        else:
            entry = sqlite_backup(url, dest, incremental=incremental)
    except DormantError as exc:
        fail(exc)
    _say("backed up", entry, f"in {dest}")


def restore(
    src: Annotated[Path, typer.Argument(help="Backup directory written by `dormant backup`.")],
    store: StoreOpt = DEFAULT_STORE,
    at: Annotated[
        int | None,
        typer.Option(
            "--at", envvar="DORMANT_RESTORE_AT", min=1, help="Entry number (default: newest recoverable)."
        ),
    ] = None,
    force: Annotated[
        bool,
        typer.Option("--force", envvar="DORMANT_RESTORE_FORCE", help="Replace an existing database."),
    ] = False,
    pg_bin: PgBinOpt = None,
) -> None:
    """Restore a backup into the store (stop every process using it first)."""
    url = settings_for(store).store
    try:
        if url.startswith(("postgresql://", "postgres://")):
            from ..ops.backup_pg import restore_dump

            entry = restore_dump(src, url, bin_dir=pg_bin)
        else:
            entry = sqlite_restore(src, url, at=at, force=force)
    except DormantError as exc:
        fail(exc)
    _say("restored", entry, f"into {url}")
