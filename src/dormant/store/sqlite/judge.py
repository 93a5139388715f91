"""``dormant doctor``'s verdict on a SQLite database: its facts
(:mod:`~dormant.store.sqlite.doctor`) judged into :class:`~dormant.store.health.Finding` rows."""

from __future__ import annotations

import msgspec

from ...errors import UsageError
from ..health import Finding, Report, judge_schema, judge_work
from .doctor import SQLiteFacts, inspect_sqlite

#: A WAL larger than this (and than the database itself) means checkpoints fall behind.
WAL_WARN_BYTES = 256 * 1024 * 1024


def diagnose(url: str, path: str, *, quick: bool, now: float, stuck_after_s: float) -> Report:
    """Examine the SQLite file ``path`` of store ``url`` read-only; UsageError if it is missing."""
    facts = inspect_sqlite(path, quick=quick, now=now, stuck_after_s=stuck_after_s)
    if not facts.exists:
        raise UsageError(f"no database at {path!r}: check --store (nothing was created)")
    return Report(
        store=url, findings=tuple(judge_sqlite(facts, url, stuck_after_s)), facts=msgspec.to_builtins(facts)
    )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):,.1f} MiB"


def judge_sqlite(facts: SQLiteFacts, url: str, stuck_after_s: float) -> list[Finding]:
    """Turn the facts of a SQLite store into findings."""
    restore = (
        f"stop every dormant process using {url}, restore the file from a backup, or salvage "
        f"what is readable with `sqlite3 {facts.path} .recover` into a new file"
    )
    if facts.open_error is not None:
        return [
            Finding(
                "open", "fail", f"the file cannot be read as a database: {facts.open_error}", hint=restore
            )
        ]
    out: list[Finding] = []
    mode = "quick_check" if facts.integrity_mode == "quick" else "integrity_check"
    if facts.integrity:
        out.append(Finding("integrity", "fail", f"{mode} found damage", tuple(facts.integrity[:10]), restore))
    else:
        out.append(Finding("integrity", "ok", f"{mode}: ok"))
    if facts.foreign_key_errors:
        out.append(
            Finding(
                "foreign keys", "fail", f"{facts.foreign_key_errors} rows point to missing rows", hint=restore
            )
        )
    out.append(judge_schema(facts, url, restore))

    size = (
        f"database {_mib(facts.db_bytes)} ({facts.page_count:,} pages of {facts.page_size:,} bytes, "
        f"{facts.freelist_pages:,} free), WAL {_mib(facts.wal_bytes)}"
    )
    if facts.wal_bytes > max(WAL_WARN_BYTES, facts.db_bytes):
        out.append(
            Finding(
                "size",
                "warn",
                size,
                hint="the WAL is not being checkpointed: look for a long-lived reader holding it open",
            )
        )
    else:
        out.append(Finding("size", "ok", size))

    out.extend(judge_work(facts, url, stuck_after_s))
    if facts.read_errors:
        out.append(
            Finding(
                "reads", "fail", "parts of the database could not be read", tuple(facts.read_errors), restore
            )
        )
    return out
