"""The checks of ``dormant bench hosts``, from the store and from the workers' ledgers.

:func:`check` waits until every acknowledged input is answered (each thread's messages
end with an answer, no tool call open) and reads the store; :meth:`Verdict.finish` then
reads the ledgers (:mod:`~dormant.bench.hosts_worker`) once the workers are stopped:

* ``missing`` / ``duplicates``: acknowledged inputs not in their thread, inputs or tool
  results recorded twice (must be 0);
* ``double_charges``: a non-idempotent call whose effect ran twice (must be 0);
* ``unknown`` calls answered "outcome unknown", split into ``unknown_ran`` (the ledger
  shows the effect began: really ambiguous) and ``unknown_unrun`` (it never began, but a
  worker had claimed it and then lost contact: the store cannot tell); ``unknown_false``:
  one whose effect ran on a worker the fault never touched (must be 0: it was not ambiguous);
  ``unknown_blocked`` (``slow`` only): one whose effect ran on a worker with a clean link
  but whose result was not recorded within the call's lease (its commit waited, behind
  the slow worker's open transactions): ambiguous to the store, as any lapsed call is;
* ``overlaps``: two committed slices of one thread whose runs (start to commit) overlapped
  (must be 0); ``fenced``: commits the store refused because the lease was lost;
  ``cancelled``: slices their own worker cancelled when it saw their lease lapse (the
  cut worker's slice ends one way or the other, never committed once the thread moved);
* ``recovery_s``: per thread, from the end of the fault (heal, restart, promote) to the
  start of its next slice that committed (the load adds a turn every ``every_s``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .hosts import HostsConfig

MESSAGES = (
    "SELECT thread_id, seq, role, content, tool_calls IS NOT NULL, tool_call_id FROM messages"
    " ORDER BY thread_id, seq"
)


@dataclass
class Verdict:
    """What one scenario run found (figures, and the checks that must be 0)."""

    scenario: str
    admitted: int = 0
    answered: int = 0
    missing: int = 0
    duplicates: int = 0
    drained: bool = False
    unknown: int = 0
    unknown_calls: list[tuple[str, str]] = field(default_factory=list)
    healed_at: float = 0.0
    fault_at: float = 0.0
    double_charges: int = 0
    charges: int = 0
    unknown_ran: int = 0
    unknown_unrun: int = 0
    unknown_false: int = 0
    unknown_blocked: int = 0
    overlaps: int = 0
    fenced: int = 0
    cancelled: int = 0
    slices: int = 0
    recovery_s: list[float] = field(default_factory=list)
    #: per thread the cut worker was running at the fault: fault to another worker's slice
    takeover_s: list[float] = field(default_factory=list)
    #: commits the cut/killed worker made after the fault ended (it rejoined)
    rejoined: int = 0
    #: the victim's committed slices that ran (in part) during the fault: start to commit done
    during_s: list[float] = field(default_factory=list)
    #: the worker the fault hit (``w1``)
    victim: str = "w1"
    #: what ``dormant doctor`` saw (:meth:`dormant.bench.hosts_doctor.DoctorWatch.summary`)
    doctor: dict[str, Any] = field(default_factory=dict)
    #: the slow link's counters (:class:`dormant.bench.netem.Stats`), ``slow`` only
    link: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check that must hold, held."""
        return (
            self.drained
            and self.missing == 0
            and self.duplicates == 0
            and self.double_charges == 0
            and self.overlaps == 0
            and self.unknown_false == 0
        )

    def figures(self) -> dict[str, Any]:
        """The run's figures, by name."""
        rec = sorted(self.recovery_s)
        return {
            "scenario": self.scenario,
            "admitted": self.admitted,
            "answered": self.answered,
            "missing": self.missing,
            "duplicates": self.duplicates,
            "double_charges": self.double_charges,
            "charges": self.charges,
            "unknown": self.unknown,
            "unknown_ran": self.unknown_ran,
            "unknown_unrun": self.unknown_unrun,
            "unknown_false": self.unknown_false,
            "unknown_blocked": self.unknown_blocked,
            "overlaps": self.overlaps,
            "fenced": self.fenced,
            "cancelled": self.cancelled,
            "slices": self.slices,
            "recovery_p50_s": round(statistics.median(rec), 2) if rec else None,
            "recovery_max_s": round(rec[-1], 2) if rec else None,
            "takeover_max_s": round(max(self.takeover_s), 2) if self.takeover_s else None,
            "victim_commits_after": self.rejoined,
            "victim_commits_during": len(self.during_s),
            "victim_slice_p50_during_s": round(statistics.median(self.during_s), 2)
            if self.during_s
            else None,
            "doctor_before": self.doctor.get("before_exit"),
            "doctor_flagged_s": self.doctor.get("leases_flagged_at_s"),
            "doctor_cleared_s": self.doctor.get("leases_cleared_at_s"),
            "doctor_silent": ",".join(self.doctor.get("silent_workers", [])) or None,
            "doctor_victim_held_s": self.doctor.get("victim_held_until_s"),
            "doctor_victim_beat_age_s": self.doctor.get("victim_heartbeat_age_s"),
            "doctor_after": self.doctor.get("after_exit"),
            "link_chunks_delayed": self.link.get("delayed"),
            "link_stalls": self.link.get("stalls"),
            "link_max_held_s": round(float(self.link["max_held_s"]), 2) if self.link else None,
            "ok": self.ok,
        }

    def finish(self, out: Path, faulted: set[str]) -> None:
        """Read every worker's ledger in ``out`` and fill in the ledger checks (``faulted``: the
        workers the fault cut off or killed; the database's faults touch every worker)."""
        runs: Counter[tuple[str, str]] = Counter()
        ran_on: dict[tuple[str, str], set[str]] = defaultdict(set)
        starts: dict[tuple[str, str], float] = {}
        commits: dict[tuple[str, str], float] = {}
        ended: dict[tuple[str, str], float] = {}
        committed: list[tuple[str, str]] = []
        worker: dict[tuple[str, str], str] = {}
        cancelled: set[tuple[str, str]] = set()
        for path in sorted(out.glob("ledger-*.log")):
            name = path.stem.removeprefix("ledger-")
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) < 2:
                    continue  # a line cut by kill -9 has no time yet
                kind = parts[0]
                if kind == "run" and parts[1] == "charge" and len(parts) == 5:
                    runs[(parts[2], parts[3])] += 1
                    ran_on[(parts[2], parts[3])].add(name)
                elif kind == "slice" and len(parts) == 4:
                    starts[(parts[1], parts[2])] = float(parts[3])
                    worker[(parts[1], parts[2])] = name
                elif kind == "commit" and len(parts) == 4:
                    commits[(parts[1], parts[2])] = float(parts[3])
                elif kind == "ok" and len(parts) == 4:
                    committed.append((parts[1], parts[2]))
                    ended[(parts[1], parts[2])] = float(parts[3])
                elif kind == "fenced":
                    self.fenced += 1
                elif kind == "cancelled" and len(parts) == 4 and (parts[1], parts[2]) not in cancelled:
                    cancelled.add((parts[1], parts[2]))
        self.cancelled = len(cancelled)
        self.charges = len(runs)
        self.double_charges = sum(1 for n in runs.values() if n > 1)
        (out / "unknown.json").write_text(
            json.dumps([[t, c, sorted(ran_on[(t, c)])] for t, c in self.unknown_calls])
        )  # the calls answered "outcome unknown", and where the ledger shows their effect ran
        for thread, call in self.unknown_calls:
            if runs[(thread, call)]:
                self.unknown_ran += 1
                if ran_on[(thread, call)] & faulted:
                    continue
                if self.scenario in ("partition", "kill9"):
                    self.unknown_false += 1
                elif self.scenario == "slow":
                    self.unknown_blocked += 1
            else:
                self.unknown_unrun += 1
        spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
        done = set(committed)
        for key in committed:
            if key in starts and key in commits:
                spans[key[0]].append((starts[key], commits[key]))
                if worker[key] == self.victim and starts[key] >= self.healed_at:
                    self.rejoined += 1
                elif worker[key] == self.victim and ended[key] > self.fault_at:
                    self.during_s.append(ended[key] - starts[key])
        # the victim's slices open at the fault (never committed): when did another take over?
        for key, start in starts.items():
            if worker[key] == self.victim and key not in done and start <= self.fault_at + 0.5:
                later = [
                    s for k, s in starts.items() if k[0] == key[0] and worker[k] != self.victim and s > start
                ]
                if later:
                    self.takeover_s.append(min(later) - self.fault_at)
        self.slices = sum(len(s) for s in spans.values())
        for runs_of in spans.values():
            runs_of.sort()
            self.overlaps += sum(1 for a, b in itertools.pairwise(runs_of) if b[0] < a[1])
            after = [start for start, _ in runs_of if start >= self.healed_at]
            if after:
                self.recovery_s.append(after[0] - self.healed_at)


async def check(
    url: str, cfg: HostsConfig, acked: set[tuple[str, str]], fault_at: float, healed_at: float, turns: int
) -> Verdict:
    """Wait (up to ``cfg.drain_s``) until every acknowledged input is answered; the store's part
    of the verdict (the ledgers' part is :meth:`Verdict.finish`)."""
    import psycopg

    verdict = Verdict(cfg.scenario, admitted=len(acked), fault_at=fault_at, healed_at=healed_at)
    deadline = time.monotonic() + cfg.drain_s
    rows: list[tuple[Any, ...]] = []
    while time.monotonic() < deadline:
        try:
            async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
                rows = await (await conn.execute(MESSAGES)).fetchall()
        except psycopg.Error:
            await asyncio.sleep(0.5)
            continue
        last: dict[str, tuple[Any, ...]] = {}
        users: Counter[str] = Counter()
        for row in rows:
            last[row[0]] = row
            if row[2] == "user":
                users[row[0]] += 1
        per_thread = Counter(thread for thread, _ in acked)
        done = all(
            users[t] >= n and t in last and last[t][2] == "assistant" and not last[t][4]
            for t, n in per_thread.items()
        )
        if done:
            verdict.drained = True
            break
        await asyncio.sleep(0.5)
    user_msgs: Counter[tuple[str, str]] = Counter()
    results: Counter[tuple[str, str]] = Counter()
    for thread, _, role, content, _, call in rows:
        if role == "user":
            user_msgs[(thread, content)] += 1
        elif role == "tool":
            results[(thread, call)] += 1
            if str(content).startswith("outcome unknown"):
                verdict.unknown_calls.append((thread, call))
    verdict.unknown = len(verdict.unknown_calls)
    wanted = {(t, f"{t} turn {key.removeprefix('turn')}") for t, key in acked}
    verdict.missing = len(wanted - set(user_msgs))
    verdict.answered = len(wanted & set(user_msgs))
    verdict.duplicates = sum(n - 1 for n in user_msgs.values() if n > 1) + sum(
        n - 1 for n in results.values() if n > 1
    )
    return verdict
