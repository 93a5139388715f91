"""``dormant bench chaos``: kill -9 a worker at random moments, restart it, prove nothing broke.

The workload (:mod:`dormant.bench.chaos_worker`: threads x turns with async tools,
inline tools, child threads and poison pills) runs in a subprocess (the *victim*) on
one store: a SQLite file, or a PostgreSQL schema (``--store postgres``: a DSN in
``DORMANT_BENCH_PG_DSN``, else an embedded server). Beside it runs a *standby* worker
(:mod:`dormant.bench.chaos_procs`) that is never killed by the harness, as the other
workers of a deployment are alive while one dies. The harness SIGKILLs the victim
``kills`` times and starts it again each time; then a last run goes to the end, the
standby is stopped, and :func:`~dormant.bench.chaos_check.verify` checks the store:
every admitted input consumed exactly once, every acknowledged admission kept, every
tool call answered exactly once, per-thread order = admission order, no duplicate,
integrity ok (SQLite), no outbox entry stuck, and each poison pill dead-lettered within
its attempt cap with its thread answered. A worker a ``crash`` pill ends (exit 137) is
started again and does not count as a kill.

When to kill: most kills wait until the committed messages reach a random target
(so they land at random points of the workload: mid-slice, mid-commit,
mid-tool-call, mid-admission); a share of them (``early_share``), and every kill
once the work before the last wave is done, fire at a random time within half a
second of the restarted worker opening the store, while it recovers; and a share
(``ack_share``) are the worker killing itself right after the store acknowledged
its first admission (a probe input each worker admits when it starts), the
harshest moment for "acknowledged only once durable". Killed
runs never admit the last wave (they wait to be killed instead), so however fast
the machine, no run can finish before its kill; the final run does it. Recovery time = process start
→ its first committed slice, measured on every run that got that far; it includes
the interpreter's start and, when the dead worker held every ready thread, the
wait for its leases to expire (``lease_s``). Resume time = kill → every thread the
killed worker held claimed again (:mod:`dormant.bench.chaos_resume`): with the worker
lock files of the SQLite store it does not wait for the leases.

The suite runs it small (``tests/faults/test_kill9.py``); the bench runs it big.
"""

from __future__ import annotations

import json
import os
import random
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..urls import redact
from .chaos_check import ChaosCounts, verify
from .chaos_db import ChaosDb, open_chaos_db
from .chaos_procs import Standby, start_worker
from .chaos_resume import ResumeWatch
from .chaos_worker import POISON_EXIT, expected_messages

#: Longest a kill waits for its progress target before killing anyway.
KILL_WAIT_S = 60.0
#: A worker that commits nothing for this long short of its target has stalled: work was lost.
STALL_S = 20.0
#: Most times the final run is started again after poison-pill deaths.
MAX_FINAL_STARTS = 50
RESUME_WITH_STANDBY = (
    "kill -> every thread the killed worker held claimed again, by the standby worker "
    "(alive throughout) or the restarted one: the store's dead-worker recovery"
)
RESUME_WITH_RESTART = (
    "kill -> every thread the killed worker held claimed again by its restarted "
    "replacement: includes the process restart (no standby)"
)


class PillsUnbounded(Exception):
    """Crash pills ended workers more often than their attempt caps allow: the run stops."""


@dataclass(frozen=True)
class ChaosConfig:
    """One chaos run: the workload, how often to kill, where to write.

    ``store``: ``sqlite`` (a file in ``out``) or ``postgres`` (``url``, else a fresh schema
    from :func:`~dormant.bench.pg.bench_postgres_url`). ``pills``: poison pills of each
    kind; ``tool_attempts``: their cap (and every call's). ``standby``: run a standby
    worker beside the victim. Leases are long (30 s) so that a sample of "kill → resumed"
    can only come from the store proving the dead worker dead, never from expiry.
    """

    out: Path
    threads: int = 500
    turns: int = 10
    kills: int = 200
    concurrency: int = 32
    lease_s: float = 30.0
    early_share: float = 0.1
    ack_share: float = 0.1
    seed: int | None = None
    final_timeout_s: float = 600.0
    store: str = "sqlite"
    url: str | None = None
    standby: bool = True
    pills: int = 1
    tool_attempts: int = 3


@dataclass
class RunRecord:
    """One start of the worker: when, how it ended, what it had done."""

    started: float
    killed: bool
    mode: str
    exit_code: int | None
    recovery_ms: float | None
    messages_before: int
    messages_after: int


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return round(values[0], 1)
    return round(statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1], 1)


class Chaos:
    """The harness. :meth:`run` returns the summary (also written to ``OUT/summary.json``)."""

    def __init__(self, config: ChaosConfig, echo: Callable[[str], None] = print) -> None:
        self.config = config
        self.echo = echo
        self.out = config.out
        if config.store not in ("sqlite", "postgres"):
            raise ValueError(f"unknown store {config.store!r}: sqlite or postgres")
        self.url = config.url or ""  # set by run() when not given
        self.rng = random.Random(config.seed)
        self.total = expected_messages(config.threads, config.turns, config.pills)
        # kill runs never admit the last wave, so a worker cannot finish before its kill
        self.room = expected_messages(config.threads, config.turns, config.pills, waves=config.turns - 1)
        self.runs: list[RunRecord] = []
        self.modes = self._schedule()
        self._proc: subprocess.Popen[str] | None = None  # the worker running now
        self.poison_deaths = 0  # victim runs a crash pill ended
        self.standby: Standby | None = None
        self.db: ChaosDb
        self.resume: ResumeWatch

    def _schedule(self) -> list[str]:
        """The kind of each kill, shuffled: exact shares of "ack" and "early" kills."""
        kills = self.config.kills
        n_ack = min(kills, round(kills * self.config.ack_share))
        n_early = min(kills - n_ack, round(kills * self.config.early_share))
        modes = ["ack"] * n_ack + ["early"] * n_early + ["progress"] * (kills - n_ack - n_early)
        self.rng.shuffle(modes)
        return modes

    def _payload(self) -> dict[str, Any]:
        return {
            "dir": str(self.out),
            "threads": self.config.threads,
            "turns": self.config.turns,
            "concurrency": self.config.concurrency,
            "lease_s": self.config.lease_s,
            "pills": self.config.pills,
            "tool_attempts": self.config.tool_attempts,
        }

    def _start(
        self, *, die_after_ack: bool = False, hold: bool = True
    ) -> tuple[subprocess.Popen[str], float]:
        payload = {**self._payload(), "die_after_ack": die_after_ack, "hold_last_wave": hold}
        started = time.time()
        proc = start_worker(self.out, self.url, payload)
        self._proc = proc
        return proc, started

    def _tick(self) -> None:
        """While waiting on the victim: the resume watch, the standby's health, and the
        bound on poison deaths (raises :class:`PillsUnbounded` past it)."""
        self.resume.poll()
        if self.standby is not None:
            self.standby.poll()
        deaths = self.poison_deaths + (self.standby.deaths if self.standby else 0)
        bound = self.config.pills * self.config.tool_attempts
        if deaths > bound:
            raise PillsUnbounded(
                f"crash pills ended workers {deaths} times, more than {self.config.pills} pills x "
                f"{self.config.tool_attempts} attempts: a poison pill runs without bound"
            )

    def _standby_up(self) -> bool:
        return self.standby is not None and self.standby.ready()

    def _finish(
        self, proc: subprocess.Popen[str], started: float, *, killed: bool, mode: str, before: int
    ) -> str:
        stdout, _ = proc.communicate()
        first = [line.split()[1] for line in stdout.splitlines() if line.startswith("first_commit ")]
        recovery = (float(first[0]) - started) * 1000 if first else None
        self.runs.append(
            RunRecord(
                started=started,
                killed=killed,
                mode=mode,
                exit_code=proc.returncode,
                recovery_ms=recovery,
                messages_before=before,
                messages_after=self.db.progress(),
            )
        )
        return stdout

    def _probes(self) -> int:
        """Probes acknowledged so far: each becomes two messages before any wave goes on."""
        acks = self.out / "acks.log"
        text = acks.read_text() if acks.exists() else ""
        return len({line for line in text.splitlines() if line.startswith("ack probe-")})

    def _acks_size(self) -> int:
        acks = self.out / "acks.log"
        return acks.stat().st_size if acks.exists() else 0

    def _opened(self, pid: int, offset: int) -> bool:
        """Whether worker ``pid`` has opened the store: its ``start`` line is in the acks log
        (past ``offset``, the log's size when it was started)."""
        acks = self.out / "acks.log"
        if not acks.exists():
            return False
        with open(acks, "rb") as f:
            f.seek(offset)
            return f"start {pid}\n".encode() in f.read(64 * 1024)

    def _target(self, now: int, kills_left: int) -> int:
        """A random progress target past ``now`` for the next kill (``now`` if none is left)."""
        # what can be committed before the held-back wave: never more than the truth, so a
        # target is always reachable and a worker stuck short of it has lost work
        room = self.room + 2 * self._probes()
        step = (room - now) / (kills_left + 0.5)
        return max(now, min(room, now + int(self.rng.uniform(0.2, 1.8) * step)))

    def _kill_once(self, kills_left: int, mode: str) -> str | None:
        """Start the victim and SIGKILL it; what went wrong, if it ended on its own or
        stalled. A victim a crash pill ended is started again (same kind of kill).

        A "progress" kill draws its target when the victim has opened the store (the
        standby commits meanwhile: a target drawn at start could be passed before the
        victim takes part, and the kill would land before it holds anything)."""
        before = self.db.progress()
        target = self._target(before, kills_left)
        if mode == "progress" and target <= before:
            mode = "early"  # no work left before the held-back wave: kill while it recovers
        offset = self._acks_size()
        proc, started = self._start(die_after_ack=mode == "ack")
        deadline = time.monotonic() + KILL_WAIT_S
        last, moved = before, time.monotonic()
        stalled = opened = False
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                if proc.returncode != POISON_EXIT:
                    break
                # a crash pill ended it: not a kill; start it again and keep waiting
                self.poison_deaths += 1
                self._finish(proc, started, killed=False, mode="poison", before=before)
                offset = self._acks_size()
                proc, started = self._start()
                moved, opened = time.monotonic(), False
            self._tick()
            now = self.db.progress()
            if now != last:
                last, moved = now, time.monotonic()
            elif mode == "progress" and time.monotonic() - moved > STALL_S:
                stalled = True
                break
            if not opened and self._opened(proc.pid, offset):
                opened, moved = True, time.monotonic()
                if mode == "progress":
                    target = self._target(now, kills_left)
                    if target <= now:
                        mode = "early"
                if mode == "early":
                    # a random moment of its recovery: up to half a second after it opened
                    # the store (or the target, if it gets there first)
                    deadline = min(deadline, time.monotonic() + self.rng.uniform(0.0, 0.5))
                    mode = "early-armed"
            if mode == "progress" and opened and now >= target:
                break
            if mode == "early-armed" and target > before and now >= target:
                break
            time.sleep(self.db.poll_s)
        mode = mode.removesuffix("-armed")
        if proc.poll() is not None:
            killed = proc.returncode == -signal.SIGKILL  # it killed itself: an "ack" kill
            self._finish(proc, started, killed=killed, mode=mode, before=before)
            return None if killed else f"the worker ended by itself (exit {proc.returncode})"
        self.resume.before_kill(f"chaos-{proc.pid}", standby=self._standby_up())
        os.kill(proc.pid, signal.SIGKILL)
        self._finish(proc, started, killed=True, mode=mode, before=before)
        if stalled:
            return f"the worker stalled at {last:,} messages, short of {target:,}: was work lost?"
        return None

    def run(self) -> dict[str, Any]:
        """Kill, restart, finish, verify; write and return the summary."""
        config = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        for name in ("chaos.db", "chaos.db-wal", "chaos.db-shm", "effects.log", "acks.log", "worker.log"):
            (self.out / name).unlink(missing_ok=True)
        if not self.url:
            if config.store == "postgres":
                from .pg import bench_postgres_url

                self.url = bench_postgres_url()
            else:
                self.url = f"sqlite:///{(self.out / 'chaos.db').resolve()}"
        self.db = open_chaos_db(self.url)
        self.resume = ResumeWatch(self.db)
        try:
            return self._run()
        finally:  # interrupted (Ctrl-C, a test's timeout): leave no worker behind
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.communicate()
            if self.standby is not None:
                self.standby.kill()
            self.db.close()

    def _run(self) -> dict[str, Any]:
        config = self.config
        began = time.monotonic()
        kills = 0
        problems: list[str] = []
        if config.standby:
            self.standby = Standby(self.out, self.url, self._payload(), self.resume.standby_lost)
            self.standby.start()
            if not self.standby.wait_ready(KILL_WAIT_S):
                problems.append(f"the standby worker did not open the store; see {self.out / 'worker.log'}")
        try:
            while kills < config.kills and not problems:
                problem = self._kill_once(config.kills - kills, self.modes[kills])
                if problem is not None:
                    problems.append(f"{problem} (kill {kills + 1})")
                    break
                kills += 1
                if kills % 10 == 0 or kills == config.kills:
                    done = self.db.progress()
                    self.echo(f"kill {kills}/{config.kills}: {done:,}/{self.total:,} messages committed")
            problems += self._final()
        except PillsUnbounded as exc:
            problems.append(str(exc))
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.communicate()
        if self.standby is not None:
            self.standby.stop()
            problems += self.standby.problems
        counts = verify(
            self.db, self.out, config.threads, config.turns, pills=config.pills, cap=config.tool_attempts
        )
        return self._summary(kills, counts, problems, time.monotonic() - began)

    def _final(self) -> list[str]:
        """The last run, to the end (started again after poison-pill deaths)."""
        ends = time.monotonic() + self.config.final_timeout_s
        before = self.runs[-1].messages_after if self.runs else 0
        for _ in range(MAX_FINAL_STARTS):
            proc, started = self._start(hold=False)
            while proc.poll() is None and time.monotonic() < ends:
                self._tick()
                time.sleep(self.db.poll_s)
            if proc.poll() is None:
                proc.kill()
                self._finish(proc, started, killed=False, mode="final", before=before)
                return [f"the final run did not finish within {self.config.final_timeout_s:g}s"]
            if proc.returncode == POISON_EXIT:
                self.poison_deaths += 1
                self._finish(proc, started, killed=False, mode="poison", before=before)
                continue
            stdout = self._finish(proc, started, killed=False, mode="final", before=before)
            if proc.returncode != 0 or "COMPLETE" not in stdout:
                return [f"the final run failed (exit {proc.returncode}); see {self.out / 'worker.log'}"]
            return []
        return [f"the final run was ended by poison pills {MAX_FINAL_STARTS} times"]

    def _summary(self, kills: int, counts: ChaosCounts, problems: list[str], wall_s: float) -> dict[str, Any]:
        recoveries = [r.recovery_ms for r in self.runs if r.recovery_ms is not None]
        passed = counts.ok and not problems and kills == self.config.kills
        summary: dict[str, Any] = {
            "kills": kills,
            "kills_early": sum(1 for r in self.runs if r.killed and r.mode == "early"),
            "kills_after_ack": sum(1 for r in self.runs if r.killed and r.mode == "ack"),
            "kills_mid_work": sum(1 for r in self.runs if r.killed and r.messages_after > r.messages_before),
            "runs": len(self.runs),
            "inputs": counts.inputs,
            "acked_inputs": counts.acked_inputs,
            "messages": counts.messages,
            "expected_messages": counts.expected_messages,
            "threads": counts.threads,
            "tool_calls": counts.tool_calls,
            "lost": counts.lost,
            "duplicated": counts.duplicated,
            "unpaired_tool_calls": counts.unpaired_tool_calls,
            "order_violations": counts.order_violations,
            "effect_violations": counts.effect_violations,
            "stuck_outbox": counts.stuck_outbox,
            "unfinished": counts.unfinished,
            "integrity_ok": counts.integrity_ok,
            "integrity_checked": counts.integrity_checked,
            "unknown_outcomes": counts.unknown_outcomes,
            "idempotent_reruns": counts.idempotent_reruns,
            "recovery_samples": len(recoveries),
            "recovery_p50_ms": _percentile(recoveries, 50),
            "recovery_p95_ms": _percentile(recoveries, 95),
            "recovery_max_ms": round(max(recoveries), 1) if recoveries else None,
            "store": self.config.store,
            "standby": self.config.standby,
            "resume_measures": RESUME_WITH_STANDBY if self.config.standby else RESUME_WITH_RESTART,
            "resume_samples": len(self.resume.samples),
            "resume_censored": self.resume.censored,
            "resume_p50_ms": _percentile(self.resume.samples, 50),
            "resume_p95_ms": _percentile(self.resume.samples, 95),
            "resume_max_ms": round(max(self.resume.samples), 1) if self.resume.samples else None,
            "resume_restart_samples": len(self.resume.restart_samples),
            "resume_restart_p50_ms": _percentile(self.resume.restart_samples, 50),
            "resume_restart_p95_ms": _percentile(self.resume.restart_samples, 95),
            "pills": counts.pills,
            "pills_dead_lettered": counts.pills_dead_lettered,
            "pill_attempt_cap": self.config.tool_attempts,
            "pill_claims_max": counts.pill_claims_max,
            "pill_runs_max": counts.pill_runs_max,
            "poison_violations": counts.poison_violations,
            "poison_deaths": self.poison_deaths + (self.standby.deaths if self.standby else 0),
            "wall_s": round(wall_s, 1),
            "config": {
                k: str(v) if isinstance(v, Path) else redact(v) if k == "url" and v else v
                for k, v in asdict(self.config).items()
            },
            "passed": passed,
            "problems": problems + counts.problems,
        }
        (self.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        with open(self.out / "runs.csv", "w") as runs:
            runs.write("started,killed,mode,exit_code,recovery_ms,messages_before,messages_after\n")
            for r in self.runs:
                recovery = "" if r.recovery_ms is None else round(r.recovery_ms, 1)
                runs.write(
                    f"{r.started:.3f},{int(r.killed)},{r.mode},{r.exit_code},{recovery},"
                    f"{r.messages_before},{r.messages_after}\n"
                )
        return summary


def run_chaos(config: ChaosConfig, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the chaos harness; the summary (``passed`` says whether every check held)."""
    return Chaos(config, echo).run()
