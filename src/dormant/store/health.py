"""The doctor's verdicts: what a check found about a store, and the whole report.

A backend judges its own database's facts into :class:`Finding` rows
(:mod:`dormant.store.sqlite.judge`, :mod:`dormant.store.postgres.judge`); the checks of
the work in a store, the same on every backend (schema version, leases, backlog, the
outbox, waiting and failed threads), are judged here once by :func:`judge_schema` and
:func:`judge_work` from facts of the shape :class:`WorkFacts`. :mod:`dormant.ops.doctor`
renders them for ``dormant doctor``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

Level = Literal["ok", "info", "warn", "fail"]
LEVELS: tuple[Level, ...] = ("ok", "info", "warn", "fail")


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


class WorkFacts(msgspec.Struct, kw_only=True):
    """What a backend's doctor read of the work in its store (samples are short lists);
    each backend's facts extend it with what only that backend has."""

    schema_version: int | None = None
    expected_version: int
    threads: int = 0
    failed_threads: int = 0
    failed_sample: list[tuple[str, int, str]] = msgspec.field(default_factory=list)
    expired_leases: int = 0
    expired_sample: list[tuple[str, str]] = msgspec.field(default_factory=list)
    overdue_threads: int = 0
    outbox_by_status: dict[str, int] = msgspec.field(default_factory=dict)
    expired_calls: int = 0
    overdue_calls: int = 0
    undelivered: int = 0
    undelivered_sample: list[tuple[str, str, str]] = msgspec.field(default_factory=list)
    stalled_threads: int = 0
    stalled_sample: list[tuple[str, int, int]] = msgspec.field(default_factory=list)


def judge_schema(facts: WorkFacts, url: str, restore: str) -> Finding:
    """The schema version against this dormant's (``restore``: the hint for a damaged store)."""
    if facts.schema_version is None:
        return Finding(
            "schema", "fail", "no schema version: not a dormant database, or damaged", hint=restore
        )
    if facts.schema_version > facts.expected_version:
        return Finding(
            "schema",
            "fail",
            f"schema version {facts.schema_version} is newer than this dormant's ({facts.expected_version})",
            hint="upgrade dormant before running it on this database",
        )
    if facts.schema_version < facts.expected_version:
        return Finding(
            "schema",
            "warn",
            f"schema version {facts.schema_version}; this dormant uses {facts.expected_version}",
            hint=f"`dormant init --store {url}` migrates it",
        )
    return Finding("schema", "ok", f"schema version {facts.schema_version}")


def judge_work(facts: WorkFacts, url: str, stuck_after_s: float) -> list[Finding]:
    """Leases, backlog, outbox, waiting and failed threads (``url`` redacted: it is shown)."""
    out: list[Finding] = []
    if facts.expired_leases:
        out.append(
            Finding(
                "leases",
                "warn",
                f"{facts.expired_leases} thread lease(s) lapsed: their worker died or hangs",
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
    return out
