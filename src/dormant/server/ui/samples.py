"""The overview's figures over the last hour: a bounded ring of samples in the process.

A :class:`Sampler` reads, every ``every_s`` seconds, what the process and the store
already know (RSS and the governor's limits and level, slices active and allowed,
slices committed, the backlog by priority and the oldest ready input's age, the view
cache, the outbox by status, dead letters, model tokens, open approvals and the
oldest one's wait) into a :class:`Sample`, and
keeps the newest ``keep`` of them (default 360 samples 10 s apart: one hour). Its size is fixed,
whatever the number of threads or of dashboards open: the pages read the ring, never
the store, for their charts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import TYPE_CHECKING

import msgspec

from ...governor.loop import rss_bytes
from ...view.cache import ViewCache

if TYPE_CHECKING:
    from ...runtime import Runtime

log = logging.getLogger("dormant.server.ui")


class Sample(msgspec.Struct, frozen=True, kw_only=True):
    """The process's and the store's figures at one time ``t`` (seconds since the epoch)."""

    t: float
    rss: int
    soft: int
    hard: int
    level: int
    active: int
    allowed: int
    #: slices committed per second since the previous sample
    turns_s: float
    backlog: dict[str, int]
    oldest_ready_s: float
    cache_bytes: int
    cache_hit_ratio: float
    outbox: dict[str, int]
    dead_letters: int
    tokens: dict[str, int]
    threads: dict[str, int]
    #: open approvals and questions, and how long the oldest has waited (s; 0: none)
    approvals_open: int = 0
    approvals_oldest_s: float = 0.0


class Sampler:
    """A fixed-size ring of :class:`Sample`, filled by :meth:`run`."""

    def __init__(self, rt: Runtime, *, every_s: float = 10.0, keep: int = 360) -> None:
        self.rt = rt
        self.every_s = every_s
        self.ring: deque[Sample] = deque(maxlen=keep)
        self._slices = rt.stats.slices
        self._at = time.monotonic()

    async def take(self) -> Sample:
        """Read one sample now and keep it."""
        rt = self.rt
        status = await rt.store.status()
        oldest = await rt.store.oldest_ready_at()
        waits, oldest_wait = await rt.store.open_approvals()
        soft = hard = level = 0
        if rt.governor is not None:
            state = rt.governor.state
            soft, hard, level = int(state.soft_limit), int(state.hard_limit), int(state.level)
        cache_bytes, ratio = 0, 0.0
        cache = getattr(rt.store, "views", None)
        if isinstance(cache, ViewCache):
            c = cache.stats()
            cache_bytes = c.bytes
            ratio = c.hits / (c.hits + c.misses) if c.hits + c.misses else 0.0
        now = time.monotonic()
        slices = rt.stats.slices
        turns = (slices - self._slices) / max(now - self._at, 1e-6)
        self._slices, self._at = slices, now
        sample = Sample(
            t=time.time(),
            rss=rss_bytes(),
            soft=soft,
            hard=hard,
            level=level,
            active=rt.scheduler.active,
            allowed=rt.scheduler.concurrency,
            turns_s=round(turns, 3),
            backlog={p: status.backlog_by_priority.get(p, 0) for p in ("P0", "P1", "P2")},
            oldest_ready_s=0.0 if oldest is None else round(max(0.0, rt.clock() - oldest), 3),
            cache_bytes=cache_bytes,
            cache_hit_ratio=round(ratio, 4),
            outbox=dict(status.outbox_by_status),
            dead_letters=status.dead_letters,
            tokens={k: status.usage.get(k, 0) for k in ("prompt", "completion", "cached")},
            threads=dict(status.threads_by_status),
            approvals_open=waits,
            approvals_oldest_s=0.0 if oldest_wait is None else round(max(0.0, rt.clock() - oldest_wait), 3),
        )
        self.ring.append(sample)
        return sample

    def since(self, t: float) -> list[Sample]:
        """The samples taken after ``t`` (oldest first; at most the ring's size)."""
        return [s for s in self.ring if s.t > t]

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every ``every_s`` seconds until ``stop`` is set (a failed read is logged and
        skipped: the chart shows a gap, never a stale value)."""
        while not stop.is_set():
            try:
                await self.take()
            except Exception as exc:
                log.warning("ui_sample_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.every_s)
