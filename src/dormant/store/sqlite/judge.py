"""``dormant doctor``'s verdict on a SQLite database: its facts
(:mod:`~dormant.store.sqlite.doctor`) judged into :class:`~dormant.store.health.Finding` rows."""

from __future__ import annotations

import msgspec

from ...errors import UsageError
from ..health import Finding, Report
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
    if facts.schema_version is None:
        out.append(
            Finding("schema", "fail", "no schema version: not a dormant database, or damaged", hint=restore)
        )
    elif facts.schema_version > facts.expected_version:
        out.append(
            Finding(
                "schema",
                "fail",
                f"schema version {facts.schema_version} is newer than this dormant's "
                f"({facts.expected_version})",
                hint="upgrade dormant before running it on this database",
            )
        )
    elif facts.schema_version < facts.expected_version:
        out.append(
            Finding(
                "schema",
                "warn",
                f"schema version {facts.schema_version}; this dormant uses {facts.expected_version}",
                hint=f"`dormant init --store {url}` migrates it",
            )
        )
    else:
        out.append(Finding("schema", "ok", f"schema version {facts.schema_version}"))

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

    if facts.expired_leases:
        out.append(
            Finding(
                "leases",
                "warn",
                f"{facts.expired_leases} thread lease(s) expired: their worker died or hangs",
                tuple(f"{tid} (held by {owner})" for tid, owner in facts.expired_sample),
                "a running worker takes them over by itself; if none runs, start `dormant run`",
            )
        )
    else:
        out.append(Finding("leases", "ok", "no expired thread lease"))
    if facts.overdue_threads or facts.overdue_calls:
        out.append(
            Finding(
                "backlog",
                "warn",
                f"{facts.overdue_threads} thread(s) and {facts.overdue_calls} tool call(s) ready for more "
                f"than {stuck_after_s:g}s and not taken",
                hint="is a worker (`dormant run`) running on this store?",
            )
        )
    else:
        out.append(Finding("backlog", "ok", "no work waiting overdue"))

    outbox = facts.outbox_by_status
    if facts.expired_calls:
        out.append(
            Finding(
                "outbox leases",
                "warn",
                f"{facts.expired_calls} running tool call(s) with an expired lease",
                hint="the next worker reconciles them: idempotent calls run again, others are answered "
                "'outcome unknown'",
            )
        )
    if facts.undelivered:
        out.append(
            Finding(
                "outbox",
                "fail",
                f"{facts.undelivered} dead-lettered or unknown call(s) whose result never reached the thread",
                tuple(f"{tid} call {cid} ({status})" for tid, cid, status in facts.undelivered_sample),
                "rule 5 is broken: report a bug; answer each call with `Runtime.post_tool_result`",
            )
        )
    else:
        counts = ", ".join(f"{k} {outbox.get(k, 0):,}" for k in ("pending", "running", "dead", "unknown"))
        out.append(
            Finding(
                "outbox",
                "info" if outbox.get("dead") or outbox.get("unknown") else "ok",
                f"{counts}; every dead-lettered and unknown call was answered",
            )
        )
    if facts.stalled_threads:
        out.append(
            Finding(
                "waiting threads",
                "fail",
                f"{facts.stalled_threads} thread(s) wait for tool results that no call will deliver",
                tuple(
                    f"{tid}: waits for {n} result(s), {have} open or delivered"
                    for tid, n, have in facts.stalled_sample
                ),
                "rule 5 is broken: report a bug",
            )
        )
    if facts.failed_threads:
        out.append(
            Finding(
                "failed threads",
                "warn",
                f"{facts.failed_threads} of {facts.threads:,} thread(s) failed",
                tuple(f"{tid} after {n} failure(s): {error}" for tid, n, error in facts.failed_sample),
                f"fix the cause, then `dormant retry THREAD --store {url}`",
            )
        )
    else:
        out.append(Finding("threads", "ok", f"{facts.threads:,} thread(s), none failed"))
    if facts.read_errors:
        out.append(
            Finding(
                "reads", "fail", "parts of the database could not be read", tuple(facts.read_errors), restore
            )
        )
    return out
