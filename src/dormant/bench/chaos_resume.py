"""The "kill → every in-flight thread running again" figure of ``dormant bench chaos``.

Just before each SIGKILL the harness notes the threads the worker about to die holds
(leased by its worker id, with their lease tokens); from then on it polls the store until
each of them was claimed again (its lease token changed), by any worker. The time from
the kill to the last of them is one sample. A next kill before every thread came back
gives no sample (it is counted as censored), nor does a kill with no thread in flight.

What a sample measures depends on who can take the threads over. With a standby worker
alive from the kill to the sample (the deployment case: other workers keep running while
one dies), it is the store's recovery: the dead worker's lock file found free (SQLite) or
its heartbeat found stale (PostgreSQL), then a claim. Without one, the killed worker's
replacement must start first (interpreter, imports, opening the store), so the sample
includes that restart; such samples are kept apart (:attr:`ResumeWatch.restart_samples`).
"""

from __future__ import annotations

import time

from .chaos_db import ChaosDb


class ResumeWatch:
    """The threads a killed worker held, until each runs again; the samples in ms."""

    def __init__(self, db: ChaosDb) -> None:
        self.db = db
        #: kill → resumed while a standby worker was alive throughout
        self.samples: list[float] = []
        #: kill → resumed when no standby was alive throughout (includes a worker's restart)
        self.restart_samples: list[float] = []
        self.censored = 0
        self._killed_at = 0.0
        self._with_standby = False
        self._waiting: dict[str, str] = {}
        self._polled = 0.0

    def before_kill(self, owner: str, standby: bool) -> None:
        """Note what worker ``owner`` holds (call right before its SIGKILL); ``standby``:
        whether a standby worker is alive and has opened the store."""
        if self._waiting:  # the previous kill's threads never all came back
            self.censored += 1
        self._waiting = {i: token for i, (token, who) in self.db.leased().items() if who == owner}
        self._with_standby = standby
        self._killed_at = time.monotonic()

    def standby_lost(self) -> None:
        """The standby died (or was stopped): a sample being taken now includes a restart."""
        self._with_standby = False

    def poll(self) -> None:
        """While workers run: drop the threads claimed again; record the sample when none
        is left. Cheap when called often (polls every ``db.poll_s``, at least 10 ms)."""
        if not self._waiting or time.monotonic() - self._polled < max(0.01, self.db.poll_s):
            return
        self._polled = time.monotonic()
        now = self.db.leased()
        self._waiting = {i: t for i, t in self._waiting.items() if now.get(i, ("", None))[0] == t}
        if not self._waiting:
            took = (self._polled - self._killed_at) * 1000
            (self.samples if self._with_standby else self.restart_samples).append(took)
