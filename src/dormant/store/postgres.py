"""The PostgreSQL backend: many worker processes (on many hosts) share one database.

Writes never run on the caller's task: each write is a *job* (one statement, mostly a
call of a ``dormant_*`` function from ``postgres_schema.sql``) queued to this
process's writer. The writer sends a whole batch of jobs as one pipelined
transaction: ``BEGIN``, a statement that locks the batch's thread rows in id order,
the jobs, an optional ``NOTIFY``, ``COMMIT`` and one sync: one round trip and one WAL
flush for many slices. Callers are answered only after that ``COMMIT``. If a job
fails, the server skips the rest of the pipeline (``COMMIT`` included), the batch is
rolled back and re-run with one savepoint per job, so a failing job takes only its
own changes with it. Deadlocks and serialization failures re-run the whole batch.
The queue is bounded in jobs and bytes; past the bound callers get ``Overloaded``.

Claims use ``FOR NO KEY UPDATE SKIP LOCKED`` and leases with expiry, so any number of
processes claim from the same tables. ``LISTEN``/``NOTIFY`` is only a wake-up hint,
on a dedicated connection (never a pooled one); the claim query is the truth. Reads
run on a small connection pool.
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any

import msgspec
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from .. import inbox
from ..cache import ViewCache
from ..errors import DormantError, NotFound, SchemaError, StoreError, UsageError
from ..records import (
    Admission,
    Claim,
    CommitPlan,
    Input,
    Message,
    NewInput,
    OutboxEntry,
    OutboxOutcome,
    Page,
    SliceLoad,
    StoreStatus,
    Thread,
    ViewLimits,
)
from . import postgres_sql as q
from .base import clamp_limit, seq_cursor
from .batching import BatchQueue
from .postgres_blobs import PostgresBlobs
from .rows import (
    MESSAGE_COLS,
    OUTBOX_COLS,
    THREAD_COLS,
    THREAD_WIDTH,
    row_entry,
    row_input,
    row_message,
    row_thread,
)

log = logging.getLogger("dormant.store.postgres")

Conn = q.Conn
Rows = q.Rows

SCHEMA_VERSION = 2
#: Ordered migrations: (version reached, SQL). A new database runs the schema file.
MIGRATIONS: list[tuple[int, str]] = [
    # token counts, compaction summaries, blobs (issue 4); the commit function as of v2
    (2, resources.files(__package__).joinpath("postgres_migrations/v2.sql").read_text()),
]

#: Notification channels: ready input (wake schedulers), new outbox entries (dispatchers).
CHANNELS = {"threads": "dormant_threads", "outbox": "dormant_outbox"}
_THREADS, _OUTBOX = q.NOTIFY_THREADS, q.NOTIFY_OUTBOX
#: Times a batch is re-run after a deadlock or serialization failure before it fails.
BATCH_RETRIES = 5


def _none(rows: Rows, count: int) -> None:
    return None


def _result_key(now: float) -> float:
    """Sort key of a tool result admitted at ``now`` (P1, due now)."""
    item = NewInput(thread_id="-", kind="tool_result", dedup_key="-", content="", call_id="-")
    return inbox.sort_key(item, now)


def _check_url(url: str) -> None:
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")


class PostgresStore(PostgresBlobs):
    """The scale-out store. See the module docstring for the write path.

    ``pool_size`` bounds the read connections of this process; the writer holds one
    more connection, and so does the listener (started by the first :meth:`subscribe`).
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        view_cache_bytes: int = 32 * 1024 * 1024,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
        batch_jobs: int = 256,
        batch_bytes: int = 8 * 1024 * 1024,
        queue_jobs: int = 20_000,
        queue_bytes: int = 64 * 1024 * 1024,
        connect_timeout_s: float = 10.0,
        lock_timeout_s: float = 10.0,
        listen: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        _check_url(url)
        if pool_size < 1:
            raise UsageError(f"pool_size must be at least 1, not {pool_size}")
        self.url = url
        self.pool_size = pool_size
        self.views = ViewCache(view_cache_bytes)
        self.max_input_bytes = max_input_bytes
        self.batch_jobs = batch_jobs
        self.batch_bytes = batch_bytes
        self.queue_jobs = queue_jobs
        self.queue_bytes = queue_bytes
        self.connect_timeout_s = connect_timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.listen = listen
        self.clock = clock
        self.commits = 0  # transactions committed by the writer (for benchmarks)
        self.retries = 0  # batches re-run after a deadlock or serialization failure
        self._instance = secrets.token_hex(8)  # NOTIFY payload: our own hints are ignored
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._conn: Conn | None = None
        self._task: BatchQueue[q.Job] | None = None  # the writer; None while closed
        self._listener: asyncio.Task[None] | None = None
        self._subscribers: list[Callable[[str], None]] = []
        self._closing = False

    # -- lifecycle -------------------------------------------------------------------

    async def _connect(self) -> Conn:
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout_s)),
                application_name="dormant",
            )
            # a worker that hangs inside a transaction must not stall the others for ever
            await conn.execute(f"SET lock_timeout = {int(self.lock_timeout_s * 1000)}")
            return conn
        except psycopg.Error as exc:
            raise q.translate(exc) from exc

    async def open(self) -> None:
        """Connect, create or migrate the schema, start the writer and the listener."""
        if self._task is not None:
            return
        conn = await self._connect()
        try:
            await self._migrate(conn)
            pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
                self.url,
                min_size=1,
                max_size=self.pool_size,
                kwargs={"autocommit": True, "application_name": "dormant"},
                open=False,
                name="dormant-reads",
                timeout=30.0,
            )
            try:
                await pool.open(wait=True, timeout=self.connect_timeout_s)
            except PoolTimeout as exc:
                await pool.close()
                raise StoreError(f"cannot open connections to PostgreSQL at {self.url!r}: {exc}") from exc
        except BaseException:
            await conn.close()
            raise
        self._pool = pool
        self._conn = conn
        self._closing = False
        self._task = BatchQueue(
            self._apply,
            name="dormant-pg-writer",
            batch_jobs=self.batch_jobs,
            batch_bytes=self.batch_bytes,
            queue_jobs=self.queue_jobs,
            queue_bytes=self.queue_bytes,
        )
        self._start_listener()
        await self.sweep_blobs()  # what puts that never finished left more than an hour ago

    def _start_listener(self) -> None:
        """Listen (one more connection) only when someone wants the hints: a runtime
        does, a one-shot command (``dormant status``) does not."""
        if self.listen and self._subscribers and self._task is not None and self._listener is None:
            self._listener = asyncio.create_task(self._listen_loop(), name="dormant-pg-listener")

    async def _migrate(self, conn: Conn) -> None:
        try:
            schema = (await (await conn.execute("SELECT current_schema()")).fetchone() or (None,))[0]
            if schema is None:
                raise UsageError(
                    f"no schema of the search_path of {self.url!r} exists; create it first "
                    "(CREATE SCHEMA ...) or fix the options=-csearch_path=... of the URL"
                )
            async with conn.transaction():
                # several processes may open a new database at once: one creates it
                await conn.execute(
                    "SELECT pg_advisory_xact_lock(hashtext('dormant-schema:' || %s::text))", (schema,)
                )
                found = await conn.execute(
                    "SELECT to_regclass(format('%I.schema_version', current_schema()))"
                )
                exists = (await found.fetchone() or (None,))[0] is not None
                if not exists:
                    text = resources.files(__package__).joinpath("postgres_schema.sql").read_text()
                    await conn.execute(text.encode())
                    await conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (SCHEMA_VERSION,))
                    return
                row = await (await conn.execute("SELECT version FROM schema_version")).fetchone()
                version = int(row[0]) if row else 0
                if version > SCHEMA_VERSION:
                    raise SchemaError(
                        f"database schema version {version} is newer than this dormant "
                        f"({SCHEMA_VERSION}); upgrade dormant to open {schema!r}"
                    )
                for target, sql in MIGRATIONS:
                    if target > version:
                        await conn.execute(sql.encode())
                        await conn.execute("UPDATE schema_version SET version = %s", (target,))
                        version = target
                if version != SCHEMA_VERSION:
                    raise SchemaError(
                        f"database schema version {version} of {schema!r} has no migration "
                        f"to version {SCHEMA_VERSION}"
                    )
        except psycopg.Error as exc:
            raise q.translate(exc) from exc

    async def close(self) -> None:
        """Let queued writes finish, stop the writer and listener, close connections."""
        if self._task is None:
            return
        self._closing = True
        await self._task.close()
        self._task = None
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("threads")`` / ``callback("outbox")`` when another process
        made input ready or wrote outbox entries. A hint only: it may be late or lost."""
        self._subscribers.append(callback)
        self._start_listener()

    async def _listen_loop(self) -> None:
        """LISTEN on a dedicated connection; reconnect with backoff when it breaks."""
        delay = 0.5
        names = {channel: name for name, channel in CHANNELS.items()}
        while True:
            conn: Conn | None = None
            try:
                conn = await self._connect()
                for channel in CHANNELS.values():
                    await conn.execute(f"LISTEN {channel}")
                delay = 0.5
                async for note in conn.notifies():
                    if note.payload == self._instance:
                        continue
                    for callback in self._subscribers:
                        callback(names.get(note.channel, note.channel))
            except (psycopg.Error, DormantError) as exc:
                log.warning("pg_listener_lost", extra={"error": str(exc), "retry_in_s": delay})
            finally:
                if conn is not None:
                    await conn.close()
            await asyncio.sleep(delay)
            delay = min(30.0, delay * 2)

    # -- the writer ------------------------------------------------------------------

    async def _write(self, job: q.Job, size: int = 256) -> Any:
        if self._task is None or self._closing:
            raise StoreError("the store is not open")
        return await self._task.submit(job, size)

    async def _writer(self) -> Conn:
        """The writer's connection, reconnected if the last one broke."""
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                await self._conn.close()
            self._conn = None
            self._conn = await self._connect()
        return self._conn

    async def _apply(self, jobs: list[q.Job]) -> list[tuple[bool, Any]]:
        """Run ``jobs`` in one transaction; re-run it after a deadlock."""
        for attempt in range(BATCH_RETRIES + 1):
            try:
                conn = await self._writer()
            except DormantError as exc:
                return [(False, exc)] * len(jobs)
            try:
                return await self._fast(conn, jobs)
            except (psycopg.Error, DormantError) as exc:
                if conn.broken or conn.closed:
                    # COMMIT may or may not have reached the server: say so, never guess
                    err = StoreError(
                        f"lost the connection to PostgreSQL during a commit ({exc}); "
                        "the outcome is unknown: retry (admissions are deduplicated)"
                    )
                    err.__cause__ = exc
                    return [(False, err)] * len(jobs)
                await self._rollback(conn)
                if q.sqlstate(exc) in q.RETRYABLE and attempt < BATCH_RETRIES:
                    self.retries += 1
                    await asyncio.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
                    continue
                if len(jobs) == 1 and q.sqlstate(exc) not in q.RETRYABLE:
                    return [(False, q.translate(exc))]
                try:
                    return await self._careful(conn, jobs)
                except psycopg.Error as exc2:
                    await self._rollback(conn)
                    return [(False, q.translate(exc2))] * len(jobs)
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    async def _rollback(conn: Conn) -> None:
        if conn.closed or conn.broken:
            return
        try:
            await conn.execute("ROLLBACK")
        except psycopg.Error:
            await conn.close()  # reconnected by the next batch

    @staticmethod
    def _lock_params(jobs: Sequence[q.Job]) -> tuple[list[str], list[int]] | None:
        threads = sorted({t for job in jobs for t in job.threads})
        entries = sorted({e for job in jobs for e in job.entries})
        return (threads, entries) if threads or entries else None

    def _notify_sql(self, jobs: Sequence[q.Job]) -> str | None:
        flags = 0
        for job in jobs:
            flags |= job.notify
        calls = [
            f"pg_notify('{CHANNELS[name]}', '{self._instance}')"
            for name, flag in (("threads", _THREADS), ("outbox", _OUTBOX))
            if flags & flag
        ]
        return f"SELECT {', '.join(calls)}" if calls else None

    async def _fast(self, conn: Conn, jobs: list[q.Job]) -> list[tuple[bool, Any]]:
        """All jobs in one pipelined transaction; raises if any of them fails."""
        locks = self._lock_params(jobs)
        notify = self._notify_sql(jobs)
        async with conn.pipeline() as pipeline:
            await conn.execute("BEGIN")
            if locks is not None:
                await conn.execute(q.LOCK_THREADS, locks)
            cursors = [await conn.execute(job.sql, job.params) for job in jobs]
            if notify is not None:
                await conn.execute(notify)
            await conn.execute("COMMIT")
            await pipeline.sync()
        self.commits += 1
        results: list[tuple[bool, Any]] = []
        for job, cursor in zip(jobs, cursors, strict=True):
            rows = await cursor.fetchall() if cursor.description is not None else []
            try:
                results.append((True, job.decode(rows, cursor.rowcount)))
            except DormantError as exc:  # the job changed nothing (see _Job.decode)
                results.append((False, exc))
        return results

    async def _careful(self, conn: Conn, jobs: list[q.Job]) -> list[tuple[bool, Any]]:
        """All jobs in one transaction, one savepoint each: a failing job fails alone."""
        await conn.execute("BEGIN")
        locks = self._lock_params(jobs)
        if locks is not None:
            await conn.execute(q.LOCK_THREADS, locks)
        results: list[tuple[bool, Any]] = []
        done: list[q.Job] = []
        for job in jobs:
            await conn.execute("SAVEPOINT job")
            try:
                cursor = await conn.execute(job.sql, job.params)
                rows = await cursor.fetchall() if cursor.description is not None else []
                value = job.decode(rows, cursor.rowcount)
            except (psycopg.Error, DormantError) as exc:
                if conn.broken or conn.closed:
                    raise
                await conn.execute("ROLLBACK TO SAVEPOINT job")
                results.append((False, q.translate(exc)))
            else:
                await conn.execute("RELEASE SAVEPOINT job")
                results.append((True, value))
                done.append(job)
        notify = self._notify_sql(done)
        if notify is not None:
            await conn.execute(notify)
        await conn.execute("COMMIT")
        self.commits += 1
        return results

    # -- reads -----------------------------------------------------------------------

    def _reads(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise StoreError("the store is not open")
        return self._pool

    async def _rows(self, sql: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Rows:
        try:
            async with self._reads().connection() as conn:
                return await (await conn.execute(sql, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc

    # -- threads ---------------------------------------------------------------------

    async def create_thread(self, thread_id: str, agent: str) -> Thread:
        """Create a thread if missing; return the stored row."""
        job = q.Job(
            q.CREATE_THREAD,
            (thread_id, agent, self.clock()),
            lambda rows, _: row_thread(rows[0]),
            threads=(thread_id,),
        )
        result: Thread = await self._write(job)
        return result

    async def get_thread(self, thread_id: str) -> Thread:
        """The thread's row; NotFound if missing."""
        rows = await self._rows(f"SELECT {THREAD_COLS} FROM threads WHERE id = %s", (thread_id,))
        if not rows:
            raise NotFound(f"no thread {thread_id!r}")
        return row_thread(rows[0])

    async def retry_thread(self, thread_id: str) -> Thread:
        """Reactivate a failed thread."""

        def decode(rows: Rows, count: int) -> Thread:
            if not rows:
                raise NotFound(f"no thread {thread_id!r}")
            return row_thread(rows[0])

        job = q.Job(
            q.RETRY_THREAD,
            {"id": thread_id, "now": self.clock()},
            decode,
            threads=(thread_id,),
            notify=_THREADS,
        )
        result: Thread = await self._write(job)
        return result

    # -- admission -------------------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Admit inputs durably (one transaction for the batch)."""
        inbox.validate(items, self.max_input_bytes)
        if not items:
            return []
        now = self.clock()
        keys = [inbox.sort_key(item, now) for item in items]

        def decode(rows: Rows, count: int) -> list[Admission]:
            return [
                Admission(input_id=r[0], thread_id=i.thread_id, dedup_key=i.dedup_key, duplicate=r[1])
                for r, i in zip(rows, items, strict=True)
            ]

        job = q.Job(
            q.ADMIT,
            (q.encode(items), keys, now),
            decode,
            threads=[item.thread_id for item in items],
            notify=_THREADS,
        )
        size = sum(len(item.content) for item in items) + 256 * len(items)
        result: list[Admission] = await self._write(job, size)
        return result

    # -- scheduling ------------------------------------------------------------------

    async def claim_threads(self, worker: str, limit: int, lease_s: float) -> list[Claim]:
        """Lease up to ``limit`` ready threads, best key first."""
        if limit <= 0:
            return []
        now = self.clock()
        token = secrets.token_hex(8)  # one token per claim batch: a lease is (thread, token)
        expires = now + lease_s
        params = {"now": now, "limit": limit, "token": token, "worker": worker, "expires": expires}

        def decode(rows: Rows, count: int) -> list[Claim]:
            ordered = sorted(rows, key=lambda r: (r[1], r[0]))
            return [Claim(thread_id=r[0], token=token, expires_at=expires, agent=r[2]) for r in ordered]

        result: list[Claim] = await self._write(q.Job(q.CLAIM_THREADS, params, decode))
        return result

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """Thread row, bounded view and ready inputs of a claimed thread."""
        try:
            async with self._reads().connection() as conn:
                cursor = await conn.execute(
                    q.LOAD_SLICE, {"id": claim.thread_id, "now": self.clock(), "limit": limits.max_inputs}
                )
                rows = await cursor.fetchall()
                if not rows:
                    raise NotFound(f"no thread {claim.thread_id!r}")
                thread = row_thread(rows[0])
                inputs: list[Input] = []
                size = 0
                for row in rows:
                    if row[THREAD_WIDTH] is None:  # the LEFT JOIN found no ready input
                        break
                    size += len(row[THREAD_WIDTH + 4])
                    if inputs and size > limits.max_input_bytes:
                        break
                    inputs.append(row_input(row[THREAD_WIDTH:]))
                cached = self.views.get(thread, limits)
                if cached is None:
                    view, summary, inherited = await q.load_view(conn, thread, limits)
                    self.views.put(thread, limits, view, summary, inherited)
                else:
                    view, summary, inherited = cached
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        return SliceLoad(thread=thread, view=view, inputs=tuple(inputs), summary=summary, inherited=inherited)

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a slice plan atomically; LeaseLost if the lease is gone."""
        messages = plan.messages
        if any(m.seq != messages[0].seq + n for n, m in enumerate(messages)):
            raise StoreError(f"the messages of a plan of {plan.thread_id!r} are not numbered in order")
        inbox.validate(plan.admissions, self.max_input_bytes)
        now = self.clock()
        keys = [inbox.sort_key(item, now) for item in plan.admissions]
        params = (q.encode(plan), keys, now)
        job = q.Job(
            q.COMMIT_SLICE,
            params,
            _none,
            threads=[plan.thread_id, *(a.thread_id for a in plan.admissions)],
            notify=(_OUTBOX if plan.calls else 0) | (_THREADS if plan.admissions else 0),
        )
        size = sum(len(m.content) for m in messages) + sum(len(a.content) for a in plan.admissions) + 512
        if plan.summary is not None:
            size += len(plan.summary.content)
        try:
            await self._write(job, size)
        except BaseException:
            self.views.discard(plan.thread_id)
            raise
        self.views.advance(plan.thread_id, messages, summarized=plan.summary is not None)

    async def release(
        self, claim: Claim, *, retry_at: float = 0.0, error: str | None = None, fail: bool = False
    ) -> None:
        """Give a lease back without committing."""
        params = {
            "retry_at": retry_at,
            "inc": 1 if error else 0,
            "error": error,
            "fail": fail,
            "now": self.clock(),
            "id": claim.thread_id,
            "token": claim.token,
        }
        await self._write(q.Job(q.RELEASE, params, _none, threads=(claim.thread_id,)))

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend held leases; return the renewed claims."""
        if not claims:
            return []
        expires = self.clock() + lease_s

        def decode(rows: Rows, count: int) -> list[Claim]:
            held = {r[0] for r in rows}
            return [msgspec.structs.replace(c, expires_at=expires) for c in claims if c.thread_id in held]

        ids = [c.thread_id for c in claims]
        job = q.Job(q.RENEW_LEASES, (expires, ids, [c.token for c in claims]), decode, threads=ids)
        result: list[Claim] = await self._write(job)
        return result

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(self, worker: str, limit: int, lease_s: float) -> list[OutboxEntry]:
        """Reconcile expired running entries, then lease due pending ones."""
        now = self.clock()
        params = (
            worker,
            max(0, limit),
            secrets.token_hex(8),
            now,
            now + lease_s,
            _result_key(now),
            inbox.UNKNOWN_OUTCOME,
        )

        def decode(rows: Rows, count: int) -> list[OutboxEntry]:
            return sorted((row_entry(r) for r in rows), key=lambda e: e.id)

        result: list[OutboxEntry] = await self._write(q.Job(q.CLAIM_OUTBOX, params, decode))
        return result

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False
    ) -> Admission:
        """Answer an open call from outside; see :meth:`Store.complete_call`."""
        item = NewInput(
            thread_id=thread_id, kind="tool_result", dedup_key=call_id, content=content, call_id=call_id
        )
        inbox.validate([item], self.max_input_bytes)
        now = self.clock()

        def decode(rows: Rows, count: int) -> Admission:
            return Admission(
                input_id=rows[0][0], thread_id=thread_id, dedup_key=call_id, duplicate=rows[0][1]
            )

        job = q.Job(
            q.COMPLETE_CALL,
            (thread_id, call_id, content, is_error, now, inbox.sort_key(item, now)),
            decode,
            threads=(thread_id,),
            notify=_THREADS,
        )
        result: Admission = await self._write(job, len(content) + 256)
        return result

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the tool result in the same transaction."""
        for outcome in outcomes:
            if len(outcome.content.encode()) > self.max_input_bytes:
                raise UsageError("tool result exceeds the input size limit; truncate it first")
        if not outcomes:
            return []
        now = self.clock()
        params = (q.encode(outcomes), now, _result_key(now))
        job = q.Job(
            q.FINISH_OUTBOX,
            params,
            lambda rows, _: [bool(r[0]) for r in rows],
            entries=[o.entry_id for o in outcomes],
            notify=_THREADS if any(o.kind != "retry" for o in outcomes) else 0,
        )
        result: list[bool] = await self._write(job, sum(len(o.content) for o in outcomes) + 256)
        return result

    # -- paged reads -----------------------------------------------------------------

    async def history(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
    ) -> Page[Message]:
        """One page of a thread's messages; the cursor is the last seq seen."""
        limit = clamp_limit(limit)
        if newest_first:
            after = seq_cursor(cursor, default=2**62)
            sql = (
                f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq < %s "
                "ORDER BY seq DESC LIMIT %s"
            )
        else:
            after = seq_cursor(cursor, default=0)
            sql = (
                f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = %s AND seq > %s ORDER BY seq LIMIT %s"
            )
        try:
            async with self._reads().connection() as conn:
                known = await (
                    await conn.execute("SELECT 1 FROM threads WHERE id = %s", (thread_id,))
                ).fetchone()
                if known is None:
                    raise NotFound(f"no thread {thread_id!r}")
                rows = await (await conn.execute(sql, (thread_id, after, limit + 1))).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        items = tuple(row_message(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].seq) if more and items else None)

    async def list_threads(self, *, cursor: str | None = None, limit: int = 50) -> Page[Thread]:
        """One page of threads by id."""
        limit = clamp_limit(limit)
        rows = await self._rows(
            f"SELECT {THREAD_COLS} FROM threads WHERE id > %s ORDER BY id LIMIT %s",
            (cursor or "", limit + 1),
        )
        items = tuple(row_thread(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=items[-1].id if more and items else None)

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries by id."""
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=0)
        rows = await self._rows(
            f"SELECT {OUTBOX_COLS} FROM outbox "
            "WHERE id > %s AND (%s::text IS NULL OR status = %s::text) ORDER BY id LIMIT %s",
            (after, status, status, limit + 1),
        )
        items = tuple(row_entry(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].id) if more and items else None)

    async def has_work(self) -> bool:
        """Ready input, a leased thread, or an open outbox entry."""
        rows = await self._rows(q.HAS_WORK, {"now": self.clock()})
        return bool(rows[0][0])

    async def status(self) -> StoreStatus:
        """Counts and sizes for ``dormant status``."""
        now = self.clock()
        try:
            async with self._reads().connection() as conn:
                async with conn.pipeline():
                    cursors = [
                        await conn.execute("SELECT status, count(*) FROM threads GROUP BY status"),
                        await conn.execute(
                            "SELECT count(*) FROM threads WHERE ready_key IS NOT NULL AND ready_at <= %s",
                            (now,),
                        ),
                        await conn.execute("SELECT count(*) FROM threads WHERE lease_token IS NOT NULL"),
                        await conn.execute("SELECT priority, count(*) FROM inputs GROUP BY priority"),
                        await conn.execute("SELECT status, count(*) FROM outbox GROUP BY status"),
                        await conn.execute("SELECT count(*) FROM messages"),
                        await conn.execute("SELECT version FROM schema_version"),
                        await conn.execute(q.TABLE_BYTES),
                    ]
                by_status, ready, leased, backlog, outbox, messages, version, size = [
                    await c.fetchall() for c in cursors
                ]
        except (psycopg.Error, PoolTimeout) as exc:
            raise q.translate(exc) from exc
        counts = {str(s): int(n) for s, n in outbox}
        return StoreStatus(
            threads_by_status={str(s): int(n) for s, n in by_status},
            threads_ready=int(ready[0][0]),
            threads_leased=int(leased[0][0]),
            backlog_by_priority={f"P{p}": int(n) for p, n in backlog},
            outbox_by_status=counts,
            dead_letters=counts.get("dead", 0),
            messages=int(messages[0][0]),
            db_bytes=int(size[0][0]),
            wal_bytes=0,
            schema_version=int(version[0][0]),
        )
