"""The background retention pass: :func:`dormant.retention.policy.gc_round` on a timer, one
bounded round at a time, supervised by :meth:`dormant.runtime.Runtime.run`.

A *pass* visits every thread once, a page (``threads_per_round``) per round, each
round bounded in what it cuts and deletes (:class:`~dormant.retention.policy.RetentionPolicy`).
Between rounds the loop yields and checks its stop event, so stopping waits for at most
one round. A pass starts ``interval_s`` seconds after the previous one ended (0: never
by itself), or at once when :meth:`poke` is called: the RSS governor's warn hook
does that, asking for a pass that also writes a checkpoint of every thread whose state
changed since its last one. Each pass checks the tier sizes once when a budget is set.

A round that fails (a store error: locked, full, gone) is logged and the pass is
retried at the next interval; it never ends the runtime, since retention only saves
space and nothing depends on it having run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from ..journal.rules import CheckpointPolicy
from ..records import Thread, TierSizes
from ..store.base import Store
from .policy import GcRound, RetentionPolicy, gc_round

log = logging.getLogger(__name__)


class RetentionLoop:
    """Runs retention passes over ``store`` until stopped (see the module docstring)."""

    def __init__(
        self,
        store: Store,
        policy: RetentionPolicy,
        checkpoints: CheckpointPolicy | None,
        *,
        interval_s: float,
        clock: Callable[[], float] = time.time,
        policy_for: Callable[[Thread], RetentionPolicy] | None = None,
    ) -> None:
        if interval_s < 0:
            raise ValueError("the retention interval must be >= 0 (0: passes only when poked)")
        self.store = store
        self.policy = policy
        #: a thread's own policy (its agent's ``retention``); None: ``policy`` for all
        self.policy_for = policy_for
        self.checkpoints = checkpoints
        self.interval_s = interval_s
        self.clock = clock
        self._wake = asyncio.Event()
        self._force_checkpoints = False
        #: rounds run, passes completed, and what they did (for tests and logs)
        self.rounds = 0
        self.passes = 0
        self.shrunk = 0
        self.deleted = 0
        self.summaries = 0
        self.demoted = 0
        self.checkpoints_written = 0
        self.failures = 0

    def poke(self, *, checkpoint: bool = False) -> None:
        """Start a pass now (after the round running, if any); with ``checkpoint``, that
        pass also writes a checkpoint of every thread whose state changed since its last."""
        self._force_checkpoints = self._force_checkpoints or checkpoint
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Wait, pass, wait, ... until ``stop`` is set; returns within one round of it."""
        while True:
            await self._sleep(stop)
            if stop.is_set():
                return
            force, self._force_checkpoints = self._force_checkpoints, False
            self._wake.clear()
            try:
                await self.one_pass(stop, force_checkpoints=force)
            except Exception as exc:  # retention saves space; a failed pass is retried later
                self.failures += 1
                log.error("retention_pass_failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    async def one_pass(self, stop: asyncio.Event | None = None, *, force_checkpoints: bool = False) -> None:
        """Visit every thread once, round by round (stops early when ``stop`` is set)."""
        sizes = await self.store.retention_sizes() if self.policy.budget_bytes else None
        cursor: str | None = None
        while True:
            done = await self.round(cursor, sizes=sizes, force_checkpoints=force_checkpoints)
            cursor = done.cursor
            if cursor is None:
                self.passes += 1
                return
            await asyncio.sleep(0)  # let slices run between rounds
            if stop is not None and stop.is_set():
                return

    async def round(
        self, cursor: str | None, *, sizes: TierSizes | None = None, force_checkpoints: bool = False
    ) -> GcRound:
        """One bounded round from ``cursor`` (``sizes``: the tier sizes the budget is checked against)."""
        done = await gc_round(
            self.store,
            self.policy,
            self.checkpoints,
            self.clock(),
            cursor,
            sizes=sizes,
            force_checkpoints=force_checkpoints,
            policy_for=self.policy_for,
        )
        self.rounds += 1
        self.shrunk += done.shrunk
        self.deleted += done.deleted
        self.summaries += done.summaries
        self.demoted += done.demoted
        self.checkpoints_written += done.checkpoints
        if done.shrunk or done.deleted or done.summaries or done.checkpoints or done.demoted:
            log.info(
                "retention_round",
                extra={
                    "threads": done.threads,
                    "shrunk": done.shrunk,
                    "deleted": done.deleted,
                    "summaries": done.summaries,
                    "demoted": done.demoted,
                    "checkpoints": done.checkpoints,
                },
            )
        return done

    async def _sleep(self, stop: asyncio.Event) -> None:
        """Until the interval passes, :meth:`poke` is called or ``stop`` is set."""
        if self._wake.is_set() or stop.is_set():
            return
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED), self.interval_s or None
                )
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
