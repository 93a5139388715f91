"""The "kill → every in-flight thread running again" figure of ``dormant bench chaos``.

Just before each SIGKILL the harness notes the threads the worker holds (leased, with
their lease tokens); from then on, while the next worker runs, it polls the file until
each of them was claimed again (its lease token changed). The time from the kill to the
last of them is one sample. A next run killed before every thread came back gives no
sample (it is counted as censored), nor does a kill with no thread in flight.
"""

from __future__ import annotations

import time
from pathlib import Path

import apsw

#: Least time between two polls of the file (each opens a read-only connection).
POLL_S = 0.01


def leased(db: Path) -> dict[str, str]:
    """Thread id → lease token of every leased thread of ``db`` (read-only)."""
    if not db.exists():
        return {}
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.setbusytimeout(1000)
            rows = conn.execute("SELECT id, lease_token FROM threads WHERE lease_token IS NOT NULL")
            return {str(i): str(t) for i, t in rows}
        finally:
            conn.close()
    except apsw.Error:
        return {}


def still_held(db: Path, held: dict[str, str]) -> set[str]:
    """The threads of ``held`` whose lease token has not changed since (read-only)."""
    now = leased(db)
    return {i for i, token in held.items() if now.get(i) == token}


class ResumeWatch:
    """The threads a killed worker held, until each runs again; the samples in ms."""

    def __init__(self, db: Path) -> None:
        self.db = db
        self.samples: list[float] = []
        self.censored = 0
        self._killed_at = 0.0
        self._waiting: dict[str, str] = {}
        self._polled = 0.0

    def before_kill(self) -> None:
        """Note what the worker about to be killed holds (call right before SIGKILL)."""
        if self._waiting:  # the previous kill's threads never all came back
            self.censored += 1
        self._waiting = leased(self.db)
        self._killed_at = time.monotonic()

    def poll(self) -> None:
        """While a worker runs: drop the threads claimed again; record the sample when
        none is left. Cheap when called often (polls every :data:`POLL_S`)."""
        if not self._waiting or time.monotonic() - self._polled < POLL_S:
            return
        self._polled = time.monotonic()
        left = still_held(self.db, self._waiting)
        self._waiting = {i: t for i, t in self._waiting.items() if i in left}
        if not self._waiting:
            self.samples.append((self._polled - self._killed_at) * 1000)
