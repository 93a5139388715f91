"""The doctor's verdicts: what a check found about a store, and the whole report.

A backend judges its own database's facts into :class:`Finding` rows
(:mod:`dormant.store.sqlite.judge`); :mod:`dormant.ops.doctor` gathers them with the
store-wide checks and renders them for ``dormant doctor``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

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
