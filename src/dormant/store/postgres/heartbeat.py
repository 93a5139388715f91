"""The database clock and worker heartbeats of the PostgreSQL backend.

Workers on several hosts share one database, so a lease must not depend on any one
host's clock: :class:`DbClock` is the server's clock as this process estimates it
(its own clock plus an offset measured against ``clock_timestamp()`` at the midpoint of
a round trip, refreshed every beat). Leases, readiness and stamps all use it, so a
host whose clock runs ahead does not take live leases.

:class:`Heartbeat` writes ``heartbeat_at = now()`` for each worker id this process
claims as, every ``period_s``. A worker whose heartbeat is older than ``dead_after_s``
died (kill -9, a lost host): its thread and call leases are free to the next claim at
once instead of when they expire.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import DormantError, WorkerIdInUse
from . import sql
from .driver import Conn, translate

log = logging.getLogger("dormant.store.postgres")

#: Most worker ids one process heartbeats for (a runtime uses one).
MAX_WORKERS = 64
#: Clock samples the offset is chosen from (one a beat).
SAMPLES = 16

# a worker id is taken by this process unless another one beat for it within p_dead seconds
TAKE_WORKER_ID = """
INSERT INTO workers AS w (id, host, pid, started_at, heartbeat_at) VALUES (%s, %s, %s, now(), now())
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, pid = excluded.pid, started_at = now(), heartbeat_at = now()
WHERE (w.host = excluded.host AND w.pid = excluded.pid)
   OR w.heartbeat_at < now() - make_interval(secs => %s)
RETURNING id
"""
WORKER_ID_HOLDER = (
    "SELECT host, pid, extract(epoch FROM now() - heartbeat_at)::float8 FROM workers WHERE id = %s"
)


class DbClock:
    """The database server's clock (seconds since the epoch), estimated locally.

    Each :meth:`sync` is one sample of (round trip, offset); the offset used is the one of
    the sample with the shortest round trip among the last :data:`SAMPLES` (a loaded host
    delays some round trips, and a long one makes a poor estimate: NTP's clock filter).
    """

    def __init__(self, local: Callable[[], float] = time.time) -> None:
        self.local = local
        self.offset = 0.0  # server minus local, until measured: the local clock
        self._samples: deque[tuple[float, float]] = deque(maxlen=SAMPLES)

    def __call__(self) -> float:
        return self.local() + self.offset

    async def sync(self, conn: Conn, samples: int = 1) -> None:
        """Take ``samples`` samples on ``conn`` (one round trip each)."""
        for _ in range(samples):
            before = self.local()
            row = await (await conn.execute(sql.DB_NOW)).fetchone()
            after = self.local()
            if row is not None:
                self._samples.append((after - before, float(row[0]) - (before + after) / 2))
        if self._samples:
            self.offset = min(self._samples)[1]


class Heartbeat:
    """Beats for the worker ids :meth:`add` was given, and keeps a :class:`DbClock` in
    step, on a pooled connection every ``period_s``; a background task from :meth:`start`
    to :meth:`stop`."""

    def __init__(
        self,
        reads: Callable[[], AsyncConnectionPool[Conn]],
        clock: DbClock | None,
        period_s: float,
    ) -> None:
        self._reads = reads
        self.clock = clock
        self.period_s = period_s
        self.workers: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        self._forgot_at = float("-inf")

    def add(self, worker: str) -> bool:
        """Beat for ``worker`` from now on (bounded: past MAX_WORKERS ids, no more);
        whether it is new (then beat at once, so it has a row before it holds leases)."""
        if worker in self.workers or len(self.workers) >= MAX_WORKERS:
            return False
        self.workers.add(worker)
        return True

    def wants(self, worker: str) -> bool:
        """Whether :meth:`add` would take ``worker`` as new."""
        return worker not in self.workers and len(self.workers) < MAX_WORKERS

    async def take(self, worker: str, dead_after_s: float) -> None:
        """Take ``worker`` for this process before its first beat. While another process
        beats for it, wait (a restarted worker's predecessor may have just died: its row
        goes stale within ``dead_after_s``); if it still beats after that, raise
        :class:`WorkerIdInUse`. Call it before :meth:`add`: the beats overwrite the row."""
        deadline = time.monotonic() + dead_after_s + self.period_s
        args = (worker, socket.gethostname(), os.getpid(), dead_after_s)
        while True:
            try:
                async with self._reads().connection() as conn:
                    if await (await conn.execute(TAKE_WORKER_ID, args)).fetchone() is not None:
                        return
                    holder = await (await conn.execute(WORKER_ID_HOLDER, (worker,))).fetchone()
            except (psycopg.Error, PoolTimeout) as exc:
                raise translate(exc) from exc
            if time.monotonic() >= deadline:
                host, pid, age = holder if holder is not None else ("?", 0, 0.0)
                raise WorkerIdInUse(
                    f"worker id {worker!r} is in use by process {pid} on {host} (its heartbeat is "
                    f"{age:.1f} s old): give each worker its own worker_id"
                )
            await asyncio.sleep(self.period_s)

    async def beat(self) -> None:
        """One beat: the workers' rows, the clock offset, old rows now and then."""
        try:
            async with self._reads().connection() as conn:
                if self.workers:
                    await conn.execute(
                        sql.HEARTBEAT, (socket.gethostname(), os.getpid(), sorted(self.workers))
                    )
                if self.clock is not None:
                    await self.clock.sync(conn)
                if time.monotonic() - self._forgot_at > 600:
                    self._forgot_at = time.monotonic()
                    await conn.execute(sql.FORGET_WORKERS)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    def start(self) -> None:
        """Beat in the background until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="dormant-pg-heartbeat")

    async def stop(self) -> None:
        """Stop beating (the rows age; leases stay until they expire or look dead)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.period_s)
            try:
                await self.beat()
            except DormantError as exc:  # the next beat tries again; leases are the truth
                log.warning("pg_heartbeat_failed", extra={"error": str(exc)})
