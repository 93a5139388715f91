"""``dormant doctor`` against the database of ``dormant bench hosts``, through the faults.

:class:`DoctorWatch` runs the doctor (:func:`dormant.ops.doctor.diagnose`, a plain
read-only connection from the harness's namespace) before the fault, every
``every_s`` while it lasts, and once everything is drained; each sample is a line of
``doctor.jsonl`` (exit code, every finding's level, the summaries of those not ok), and
:meth:`DoctorWatch.summary` says what it saw: when during the fault it first flagged
lapsed leases or a silent worker holding leases, when it stopped (the leases were taken
over), which workers it found silent, and its verdict before and after.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

#: samples kept at most (one every quarter second: five minutes of fault)
MAX_SAMPLES = 1200


class DoctorWatch:
    """Doctor samples of the store at ``url``, written to ``path``."""

    def __init__(self, url: str, path: Path, every_s: float = 0.25) -> None:
        self.url, self.path, self.every_s = url, path, every_s
        self.samples: list[dict[str, Any]] = []

    def sample(self, label: str, *, quick: bool = True) -> dict[str, Any]:
        """Run the doctor once (``quick``: without amcheck) and keep what it found."""
        from ..ops.doctor import diagnose

        at = time.time()
        report = diagnose(self.url, quick=quick, stuck_after_s=60.0)
        facts = report.facts
        row = {
            "label": label,
            "t": at,
            "took_s": round(time.time() - at, 3),
            "exit": report.exit_code,
            "levels": {f.check: f.level for f in report.findings},
            "flagged": {f.check: f.summary for f in report.findings if f.level in ("warn", "fail")},
            "lapsed_leases": int(facts.get("expired_leases", 0)),
            "silent": [
                w[0] for w in facts.get("worker_rows", []) if w[3] > float(facts.get("dead_after_s", 4.0))
            ],
            # each worker: seconds since its heartbeat, thread leases and call leases it holds
            "workers": {w[0]: (round(w[3], 2), w[4], w[5]) for w in facts.get("worker_rows", [])},
        }
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append(row)
        with open(self.path, "a") as out:
            out.write(json.dumps(row) + "\n")
        return row

    def watch(self, seconds: float) -> None:
        """Sample every ``every_s`` for ``seconds`` (blocking: the fault's own duration)."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            began = time.monotonic()
            self.sample("during")
            time.sleep(max(0.0, min(left, self.every_s - (time.monotonic() - began))))

    def summary(self, fault_at: float, victim: str = "w1") -> dict[str, Any]:
        """What the doctor saw (times in seconds after ``fault_at``; ``victim``: the worker
        the fault hit, whose heartbeat age and leases it follows)."""

        def flagged(row: dict[str, Any]) -> bool:
            levels: dict[str, str] = row["levels"]
            return levels.get("leases") == "warn" or levels.get("workers") == "warn"

        during = [s for s in self.samples if s["label"] == "during"]
        first = next((s for s in during if flagged(s)), None)
        cleared = None
        if first is not None:
            cleared = next((s for s in during if s["t"] > first["t"] and not flagged(s)), None)
        held = [s for s in during if (row := s["workers"].get(victim)) and (row[1] or row[2])]
        before = next((s for s in self.samples if s["label"] == "before"), None)
        after = next((s for s in self.samples if s["label"] == "after"), None)
        return {
            "before_exit": before["exit"] if before else None,
            "before_flagged": before["flagged"] if before else {},
            "during_samples": len(during),
            "during_exits": sorted({s["exit"] for s in during}),
            "leases_flagged_at_s": round(first["t"] - fault_at, 2) if first else None,
            "leases_cleared_at_s": round(cleared["t"] - fault_at, 2) if cleared else None,
            "max_lapsed_leases": max((s["lapsed_leases"] for s in during), default=0),
            "silent_workers": sorted({w for s in during for w in s["silent"]}),
            # the victim's leases, seen with its heartbeat going stale, until taken over
            "victim_held_until_s": round(held[-1]["t"] - fault_at, 2) if held else None,
            "victim_heartbeat_age_s": max((s["workers"][victim][0] for s in held), default=None),
            "after_exit": after["exit"] if after else None,
            "after_flagged": after["flagged"] if after else {},
            "after_levels": after["levels"] if after else {},
        }
