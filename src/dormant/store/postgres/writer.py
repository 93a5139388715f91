"""The PostgreSQL backend's writer: one connection that group-commits queued jobs.

Writes never run on the caller's task: each write is a :class:`Job` (one statement,
mostly a call of a ``dormant_*`` function of ``schema.sql``) queued to the writer. It
sends a whole batch of jobs as one pipelined transaction: ``BEGIN``, a statement that
locks the batch's thread rows in id order, the jobs, an optional ``NOTIFY``, ``COMMIT``
and one sync: one round trip and one WAL flush for many slices. Callers are answered
only after that ``COMMIT``. If a job fails, the server skips the rest of the pipeline
(``COMMIT`` included), the batch is rolled back and re-run with one savepoint per
job, so a failing job takes only its own changes with it. Deadlocks and
serialization failures re-run the whole batch. The queue is bounded in jobs and
bytes; past the bound callers get ``Overloaded``.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from ...errors import DormantError, StoreError
from ..batching import BatchQueue
from . import sql
from .driver import RETRYABLE, Conn, Rows, lost_commit, sqlstate, translate

#: Job.notify flags: ready input (wake schedulers), new outbox entries (wake dispatchers).
NOTIFY_THREADS, NOTIFY_OUTBOX = 1, 2


def channels(schema: str) -> dict[str, str]:
    """The notification channels of the store in ``schema``, by the name subscribers are
    called with. Channels are database-wide, so their names carry a hash of the schema:
    stores in other schemas of the same database do not wake each other."""
    tag = hashlib.sha256(schema.encode()).hexdigest()[:12]
    return {"threads": f"dormant_threads_{tag}", "outbox": f"dormant_outbox_{tag}"}


_FLAGS = (("threads", NOTIFY_THREADS), ("outbox", NOTIFY_OUTBOX))
#: Times a batch is re-run after a deadlock or serialization failure before it fails.
BATCH_RETRIES = 5
#: Batches whose jobs carry more bytes than this run without pipeline mode, one statement
#: at a time (as after a failed batch): a pipelined batch of a few large parameters was
#: seen to stall with the last of its bytes still in the client's buffer and the server
#: waiting to read them. Big batches are rare (large inputs, blobs are chunked) and their
#: cost is the bytes, not the round trips.
PIPELINE_MAX_BYTES = 256 * 1024


@dataclass(slots=True, eq=False)
class Job:
    """One queued write: a statement, how to read its answer, the rows it changes
    (locked first, in id order) and the hints it sends."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any]
    #: (rows, rowcount) -> the caller's answer; raises only when the statement changed nothing
    decode: Callable[[Rows, int], Any]
    threads: Sequence[str] = ()  # thread rows it changes
    entries: Sequence[int] = ()  # outbox entries whose thread rows it changes
    notify: int = 0  # NOTIFY_THREADS | NOTIFY_OUTBOX
    size: int = 256  # its bytes, as its caller estimated them (set by Writer.submit)


@dataclass(frozen=True, slots=True)
class WriterLimits:
    """Bounds of one writer's batches and queue."""

    batch_jobs: int = 256
    batch_bytes: int = 8 * 1024 * 1024
    queue_jobs: int = 20_000
    queue_bytes: int = 64 * 1024 * 1024


class Writer:
    """The group-committing writer (see the module docstring) over its own connection.

    ``connect`` opens a connection (the writer reconnects after a broken one);
    ``instance`` is the NOTIFY payload, so a process can ignore its own hints;
    ``channel_names`` are the channels of :func:`channels`.
    """

    def __init__(
        self,
        conn: Conn,
        connect: Callable[[], Awaitable[Conn]],
        instance: str,
        channel_names: Mapping[str, str],
        limits: WriterLimits,
    ) -> None:
        self._channels = dict(channel_names)
        self._conn: Conn | None = conn
        self._connect = connect
        self._instance = instance
        self.commits = 0  # transactions committed (for benchmarks)
        self.retries = 0  # batches re-run after a deadlock or serialization failure
        self._closing = False
        self._queue: BatchQueue[Job] = BatchQueue(
            self._apply,
            name="dormant-pg-writer",
            batch_jobs=limits.batch_jobs,
            batch_bytes=limits.batch_bytes,
            queue_jobs=limits.queue_jobs,
            queue_bytes=limits.queue_bytes,
        )

    async def submit(self, job: Job, size: int = 256) -> Any:
        """Queue ``job`` (``size``: its bytes, for the queue bound); its answer after COMMIT."""
        if self._closing:
            raise StoreError("the store is not open")
        job.size = size
        return await self._queue.submit(job, size)

    async def close(self) -> None:
        """Let queued jobs finish, then close the connection."""
        self._closing = True
        await self._queue.close()
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _writer(self) -> Conn:
        """The writer's connection, reconnected if the last one broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                await self._conn.close()
            self._conn = None
            self._conn = await self._connect()
        return self._conn

    async def _apply(self, jobs: list[Job]) -> list[tuple[bool, Any]]:
        """Run ``jobs`` in one transaction; re-run it after a deadlock."""
        for attempt in range(BATCH_RETRIES + 1):
            try:
                conn = await self._writer()
            except DormantError as exc:
                return [(False, exc)] * len(jobs)
            try:
                if sum(job.size for job in jobs) > PIPELINE_MAX_BYTES:
                    return await self._careful(conn, jobs)
                return await self._fast(conn, jobs)
            except (psycopg.Error, DormantError) as exc:
                if conn.broken or conn.closed:
                    # COMMIT may or may not have reached the server: say so, never guess
                    return [(False, lost_commit(exc))] * len(jobs)
                await self._rollback(conn)
                if sqlstate(exc) in RETRYABLE and attempt < BATCH_RETRIES:
                    self.retries += 1
                    await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
                    continue
                if len(jobs) == 1 and sqlstate(exc) not in RETRYABLE:
                    return [(False, translate(exc))]
                try:
                    return await self._careful(conn, jobs)
                except (psycopg.Error, DormantError) as exc2:
                    if conn.broken or conn.closed:
                        return [(False, lost_commit(exc2))] * len(jobs)
                    await self._rollback(conn)
                    return [(False, translate(exc2))] * len(jobs)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    async def _rollback(conn: Conn) -> None:
        if conn.closed or conn.broken:
            return
        try:
            await conn.execute(sql.ROLLBACK)
        except psycopg.Error:
            await conn.close()  # reconnected by the next batch

    @staticmethod
    def _lock_params(jobs: Sequence[Job]) -> tuple[list[str], list[int]] | None:
        threads = sorted({t for job in jobs for t in job.threads})
        entries = sorted({e for job in jobs for e in job.entries})
        return (threads, entries) if threads or entries else None

    def _notify_sql(self, jobs: Sequence[Job]) -> str | None:
        flags = 0
        for job in jobs:
            flags |= job.notify
        calls = [
            sql.NOTIFY.format(channel=self._channels[name], instance=self._instance)
            for name, flag in _FLAGS
            if flags & flag
        ]
        return f"SELECT {', '.join(calls)}" if calls else None

    async def _fast(self, conn: Conn, jobs: list[Job]) -> list[tuple[bool, Any]]:
        """All jobs in one pipelined transaction; raises if any of them fails."""
        locks = self._lock_params(jobs)
        notify = self._notify_sql(jobs)
        async with conn.pipeline() as pipeline:
            await conn.execute(sql.BEGIN)
            if locks is not None:
                await conn.execute(sql.LOCK_THREADS, locks)
            cursors = [await conn.execute(job.sql, job.params) for job in jobs]
            if notify is not None:
                await conn.execute(notify)
            await conn.execute(sql.COMMIT)
            await pipeline.sync()
        self.commits += 1
        results: list[tuple[bool, Any]] = []
        for job, cursor in zip(jobs, cursors, strict=True):
            rows = await cursor.fetchall() if cursor.description is not None else []
            try:
                results.append((True, job.decode(rows, cursor.rowcount)))
            except DormantError as exc:  # the job changed nothing (see Job.decode)
                results.append((False, exc))
        return results

    async def _careful(self, conn: Conn, jobs: list[Job]) -> list[tuple[bool, Any]]:
        """All jobs in one transaction, one savepoint each: a failing job fails alone."""
        await conn.execute(sql.BEGIN)
        locks = self._lock_params(jobs)
        if locks is not None:
            await conn.execute(sql.LOCK_THREADS, locks)
        results: list[tuple[bool, Any]] = []
        done: list[Job] = []
        for job in jobs:
            await conn.execute(sql.SAVEPOINT)
            try:
                cursor = await conn.execute(job.sql, job.params)
                rows = await cursor.fetchall() if cursor.description is not None else []
                value = job.decode(rows, cursor.rowcount)
            except (psycopg.Error, DormantError) as exc:
                if conn.broken or conn.closed:
                    raise
                await conn.execute(sql.ROLLBACK_TO_SAVEPOINT)
                results.append((False, translate(exc)))
            else:
                await conn.execute(sql.RELEASE_SAVEPOINT)
                results.append((True, value))
                done.append(job)
        notify = self._notify_sql(done)
        if notify is not None:
            await conn.execute(notify)
        await conn.execute(sql.COMMIT)
        self.commits += 1
        return results
