"""The SQLite group-commit writer: many callers' jobs, one transaction, then the answers.

A *job* is a function of the write connection. :meth:`GroupWriter.submit` queues
one and waits; the writer task takes what is queued (bounded by jobs and bytes),
runs it in one ``BEGIN IMMEDIATE`` transaction and commits once, then answers
every caller — so nothing is acknowledged before the commit that holds it. If a
job raises, the batch is rolled back and re-run with one savepoint per job, so a
failing job takes only its own changes with it. The queue is bounded in jobs and
bytes: past the bound :meth:`submit` raises ``Overloaded``.

By default a batch runs on the event loop's thread, between other tasks. A
dedicated thread (``executor``) keeps the loop responsive while a batch waits on
a lock held by another process, but on the agent_scale workload it costs ~50%
more CPU per turn: the jobs' Python and the slices' Python contend for the GIL
(measured: 950 vs 629 µs of CPU per turn).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apsw

from ..errors import Overloaded, StoreError
from .sqlite_sql import translate

log = logging.getLogger("dormant.store.sqlite")

# apsw.Connection; typed Any because rows are untyped tuples until converted
Conn = Any
Job = Callable[[Conn], Any]
Result = tuple[bool, Any]


class GroupWriter:
    """Runs queued jobs on ``conn`` in group-committed transactions."""

    def __init__(
        self,
        conn: Conn,
        *,
        executor: ThreadPoolExecutor | None,
        batch_jobs: int,
        batch_bytes: int,
        queue_jobs: int,
        queue_bytes: int,
    ) -> None:
        self.conn = conn
        self.executor = executor
        self.batch_jobs = batch_jobs
        self.batch_bytes = batch_bytes
        self.queue_jobs = queue_jobs
        self.queue_bytes = queue_bytes
        self.commits = 0
        self._queue: deque[tuple[Job, asyncio.Future[Any], int]] = deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._loop(), name="dormant-sqlite-writer")

    async def submit(self, job: Job, size: int = 256) -> Any:
        """Queue ``job`` and return its value once its transaction committed."""
        if self._closing:
            raise StoreError("the store is closing")
        if len(self._queue) >= self.queue_jobs or self._queued_bytes + size > self.queue_bytes:
            raise Overloaded("the store's write queue is full", retry_after=0.5)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((job, future, size))
        self._queued_bytes += size
        self._wake.set()
        return await future

    async def close(self) -> None:
        """Run what is queued, then stop."""
        self._closing = True
        self._wake.set()
        await self._task

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self._queue:
                if self._closing:
                    return
                await self._wake.wait()
                self._wake.clear()
                continue
            batch: list[tuple[Job, asyncio.Future[Any], int]] = []
            size = 0
            while self._queue and len(batch) < self.batch_jobs and size < self.batch_bytes:
                item = self._queue.popleft()
                batch.append(item)
                size += item[2]
            self._queued_bytes -= size
            jobs = [b[0] for b in batch]
            try:
                if self.executor is None:
                    results = self.apply(jobs)
                else:
                    results = await loop.run_in_executor(self.executor, self.apply, jobs)
            except Exception as exc:  # the writer must outlive any one batch
                log.error("sqlite_batch_failed", extra={"error": repr(exc)})
                error = StoreError(f"the write failed: {exc!r}")
                error.__cause__ = exc
                results = [(False, error)] * len(jobs)
            for (_, future, _), (ok, value) in zip(batch, results, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def apply(self, jobs: list[Job]) -> list[Result]:
        """Run ``jobs`` in one transaction: all back to back, or carefully if one fails."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            return [(False, translate(exc))] * len(jobs)
        try:
            values = [job(conn) for job in jobs]
        except BaseException:  # re-run carefully below
            self._rollback()
            return self._apply_careful(jobs)
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            self._rollback()
            return [(False, translate(exc))] * len(jobs)
        self.commits += 1
        return [(True, value) for value in values]

    def _apply_careful(self, jobs: list[Job]) -> list[Result]:
        """Run ``jobs`` in one transaction, one savepoint each."""
        conn = self.conn
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            return [(False, translate(exc))] * len(jobs)
        results: list[Result] = []
        for job in jobs:
            try:
                conn.execute("SAVEPOINT job")
                value = job(conn)
                conn.execute("RELEASE job")
                results.append((True, value))
            except BaseException as exc:
                if not conn.in_transaction:  # SQLite rolled it all back (e.g. disk full)
                    return [(False, translate(exc))] * len(jobs)
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
                results.append((False, translate(exc)))
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            self._rollback()
            return [(False, translate(exc))] * len(jobs)
        self.commits += 1
        return results

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
