"""``dormant doctor``: is this store healthy, and if not, what should the operator do?

:func:`diagnose` reads a store's facts (for SQLite, :mod:`dormant.store.sqlite_doctor`,
which opens the file read-only and never through the store, so a damaged file can
still be examined) and judges them into :class:`Finding` rows, each with a level:

* ``ok`` / ``info`` — nothing to do;
* ``warn`` — needs attention but breaks no rule: leases of a dead worker not yet
  taken over, work nobody ran for a while (no worker running?), failed threads
  waiting for ``dormant retry``, a WAL that keeps growing;
* ``fail`` — the store is damaged or a correctness rule is broken: integrity
  errors, an unknown schema version, a dead-lettered or unknown call whose result
  never reached its thread, a thread waiting for a result that cannot come.

:attr:`Report.exit_code` is 0 when healthy, 3 with warnings only, 1 with any failure.
:func:`failed_threads` pages through failed threads on any backend (``dormant threads
--failed``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
from rich.text import Text

from .errors import UsageError
from .records import Thread
from .store.base import MAX_PAGE, Store
from .store.sqlite_doctor import SQLiteFacts, inspect_sqlite, sqlite_path

Level = Literal["ok", "info", "warn", "fail"]
LEVELS: tuple[Level, ...] = ("ok", "info", "warn", "fail")

#: A WAL larger than this (and than the database itself) means checkpoints fall behind.
WAL_WARN_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict: a one-line ``summary``, optional ``details`` and a ``hint`` to act on."""

    check: str
    level: Level
    summary: str
    details: tuple[str, ...] = ()
    hint: str | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """Everything :func:`diagnose` found about one store."""

    store: str
    findings: tuple[Finding, ...]
    facts: dict[str, Any] = field(default_factory=dict)

    @property
    def level(self) -> Level:
        """The worst level among the findings."""
        return max((f.level for f in self.findings), key=LEVELS.index, default="ok")

    @property
    def exit_code(self) -> int:
        """0 healthy, 3 warnings only, 1 something is damaged or broken."""
        return {"ok": 0, "info": 0, "warn": 3, "fail": 1}[self.level]

    def as_json(self) -> dict[str, Any]:
        """The report as plain JSON data."""
        return {
            "store": self.store,
            "status": self.level,
            "exit_code": self.exit_code,
            "findings": [
                {
                    "check": f.check,
                    "level": f.level,
                    "summary": f.summary,
                    "details": list(f.details),
                    "hint": f.hint,
                }
                for f in self.findings
            ],
            "facts": self.facts,
        }


#: Pages of threads ``threads --failed`` examines per invocation (it prints where to go on).
FAILED_SCAN_PAGES = 20


async def failed_threads(
    st: Store,
    cursor: str | None,
    limit: int,
) -> tuple[list[Thread], str | None, int]:
    """Up to ``limit`` failed threads after ``cursor``, scanning at most FAILED_SCAN_PAGES pages.

    Returns the threads, the cursor to continue from (None when every thread was
    examined) and how many threads were examined.
    """
    found: list[Thread] = []
    examined = 0
    for _ in range(FAILED_SCAN_PAGES):
        page = await st.list_threads(cursor=cursor, limit=MAX_PAGE)
        for row in page.items:
            examined += 1
            cursor = row.id
            if row.status == "failed":
                found.append(row)
                if len(found) == limit:
                    return found, cursor, examined
        if page.next_cursor is None:
            return found, None, examined
    return found, cursor, examined


def diagnose(
    url: str, *, quick: bool = False, stuck_after_s: float = 300.0, now: float | None = None
) -> Report:
    """Examine the store at ``url`` without changing it.

    Raises :class:`UsageError` for a store doctor cannot examine (``memory://`` keeps
    nothing to examine; PostgreSQL is not supported yet) or a SQLite file that does not exist.
    """
    if url.startswith("memory://"):
        raise UsageError("memory:// keeps nothing between processes: there is nothing for doctor to examine")
    if not url.startswith("sqlite://"):
        raise UsageError(f"dormant doctor examines SQLite stores (sqlite:///path.db) only, not {url!r}")
    path = sqlite_path(url)
    facts = inspect_sqlite(path, quick=quick, now=now, stuck_after_s=stuck_after_s)
    if not facts.exists:
        raise UsageError(f"no database at {path!r}: check --store (nothing was created)")
    return Report(
        store=url, findings=tuple(judge_sqlite(facts, url, stuck_after_s)), facts=msgspec.to_builtins(facts)
    )


_STYLES = {"ok": "green", "info": "cyan", "warn": "yellow", "fail": "bold red"}
_VERDICT = {"ok": "healthy", "info": "healthy", "warn": "needs attention", "fail": "DAMAGED or broken"}


def render(report: Report) -> Iterator[Text]:
    """The report as lines for a terminal: a line per finding, its details and hint, a verdict."""
    yield Text(f"dormant doctor — {report.store}", style="bold")
    for finding in report.findings:
        yield Text.assemble(
            (f"{finding.level:>4} ", _STYLES[finding.level]), (f"{finding.check}: ", "bold"), finding.summary
        )
        for detail in finding.details:
            yield Text(f"       {detail}", style="dim")
        if finding.hint and finding.level in ("warn", "fail"):
            yield Text(f"       → {finding.hint}")
    yield Text(f"verdict: {_VERDICT[report.level]} (exit {report.exit_code})", style=_STYLES[report.level])


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
