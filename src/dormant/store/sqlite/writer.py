"""The SQLite group-commit writer: many callers' jobs, one transaction, then the answers.

A *job* is a function of the write connection. Jobs queue in a
:class:`~dormant.store.batching.BatchQueue` (bounded in jobs and bytes); each batch
runs in one ``BEGIN IMMEDIATE`` transaction and commits once before any caller is
answered, so nothing is acknowledged before the commit that holds it. If a job
raises, the batch is rolled back and re-run with one savepoint per job, so a
failing job takes only its own changes with it.

By default a batch runs on the event loop's thread, between other tasks. A
dedicated thread (``executor``) keeps the loop responsive while a batch waits on
a lock held by another process, but on the agent_scale workload it costs ~50%
more CPU per turn: the jobs' Python and the slices' Python contend for the GIL
(measured: 950 vs 629 µs of CPU per turn).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import apsw

from ..batching import BatchQueue, Result
from . import sql
from .connect import translate

# apsw.Connection; typed Any because rows are untyped tuples until converted
Conn = Any
Job = Callable[[Conn], Any]


class GroupWriter:
    """Runs submitted jobs on ``conn`` in group-committed transactions."""

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
        self.commits = 0
        self._queue: BatchQueue[Job] = BatchQueue(
            self._apply_async,
            name="dormant-sqlite-writer",
            batch_jobs=batch_jobs,
            batch_bytes=batch_bytes,
            queue_jobs=queue_jobs,
            queue_bytes=queue_bytes,
        )

    async def submit(self, job: Job, size: int = 256) -> Any:
        """Queue ``job`` and return its value once its transaction committed."""
        return await self._queue.submit(job, size)

    async def close(self) -> None:
        """Run what is queued, then stop."""
        await self._queue.close()

    async def _apply_async(self, jobs: list[Job]) -> list[Result]:
        if self.executor is None:
            return self.apply(jobs)
        return await asyncio.get_running_loop().run_in_executor(self.executor, self.apply, jobs)

    def apply(self, jobs: list[Job]) -> list[Result]:
        """Run ``jobs`` in one transaction: all back to back, or carefully if one fails."""
        conn = self.conn
        try:
            conn.execute(sql.BEGIN_IMMEDIATE)
        except apsw.Error as exc:
            return [(False, translate(exc))] * len(jobs)
        try:
            values = [job(conn) for job in jobs]
        except BaseException:  # re-run carefully below
            self._rollback()
            return self._apply_careful(jobs)
        try:
            conn.execute(sql.COMMIT)
        except apsw.Error as exc:
            self._rollback()
            return [(False, translate(exc))] * len(jobs)
        self.commits += 1
        return [(True, value) for value in values]

    def _apply_careful(self, jobs: list[Job]) -> list[Result]:
        """Run ``jobs`` in one transaction, one savepoint each."""
        conn = self.conn
        try:
            conn.execute(sql.BEGIN_IMMEDIATE)
        except apsw.Error as exc:
            return [(False, translate(exc))] * len(jobs)
        results: list[Result] = []
        for job in jobs:
            try:
                conn.execute(sql.SAVEPOINT)
                value = job(conn)
                conn.execute(sql.RELEASE_SAVEPOINT)
                results.append((True, value))
            except BaseException as exc:
                if not conn.in_transaction:  # SQLite rolled it all back (e.g. disk full)
                    return [(False, translate(exc))] * len(jobs)
                conn.execute(sql.ROLLBACK_TO_SAVEPOINT)
                conn.execute(sql.RELEASE_SAVEPOINT)
                results.append((False, translate(exc)))
        try:
            conn.execute(sql.COMMIT)
        except apsw.Error as exc:
            self._rollback()
            return [(False, translate(exc))] * len(jobs)
        self.commits += 1
        return results

    def _rollback(self) -> None:
        if self.conn.in_transaction:
            self.conn.execute(sql.ROLLBACK)
