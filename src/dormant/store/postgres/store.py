"""The PostgreSQL backend: many worker processes (on many hosts) share one database.

Writes go through the group-committing :class:`~.writer.Writer` (one pipelined
transaction per batch, callers answered after COMMIT). Claims use
``FOR NO KEY UPDATE SKIP LOCKED`` and leases with expiry, so any number of processes
claim from the same tables. ``LISTEN``/``NOTIFY`` is only a wake-up hint, on a
dedicated connection (never a pooled one); the claim query is the truth. Reads run on
a small connection pool; blobs and thread deletion in :mod:`.blobs`.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import AsyncIterable, Callable, Iterable, Mapping, Sequence
from typing import Any

import msgspec
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ... import inbox
from ...cache import ViewCache
from ...errors import DormantError, NotFound, StoreError, UsageError
from ...records import (
    Admission,
    BlobRef,
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
from ..base import clamp_limit, seq_cursor
from ..rows import THREAD_WIDTH, row_entry, row_input, row_message, row_thread
from . import sql
from .blobs import PostgresBlobs
from .driver import Conn, Rows, encode, translate
from .schema import SCHEMA_VERSION, migrate
from .view import load_view
from .writer import CHANNELS, NOTIFY_OUTBOX, NOTIFY_THREADS, Job, Writer, WriterLimits

log = logging.getLogger("dormant.store.postgres")

__all__ = ["SCHEMA_VERSION", "PostgresStore"]

_THREADS, _OUTBOX = NOTIFY_THREADS, NOTIFY_OUTBOX


def _none(rows: Rows, count: int) -> None:
    return None


def _result_key(now: float) -> float:
    """Sort key of a tool result admitted at ``now`` (P1, due now)."""
    item = NewInput(thread_id="-", kind="tool_result", dedup_key="-", content="", call_id="-")
    return inbox.sort_key(item, now)


def _check_url(url: str) -> None:
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")


class PostgresStore:
    """The scale-out store. See the module docstring.

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
        self.limits = WriterLimits(batch_jobs, batch_bytes, queue_jobs, queue_bytes)
        self.connect_timeout_s = connect_timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.listen = listen
        self.clock = clock
        self.blobs = PostgresBlobs(self._reads, clock, lock_timeout_s)
        self._instance = secrets.token_hex(8)  # NOTIFY payload: our own hints are ignored
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._writer: Writer | None = None  # None while closed
        self._listener: asyncio.Task[None] | None = None
        self._subscribers: list[Callable[[str], None]] = []
        self._commits = self._retries = 0  # of writers closed before

    @property
    def commits(self) -> int:
        """Transactions committed by the writer (for benchmarks)."""
        return self._commits + (self._writer.commits if self._writer is not None else 0)

    @property
    def retries(self) -> int:
        """Batches re-run after a deadlock or serialization failure."""
        return self._retries + (self._writer.retries if self._writer is not None else 0)

    @property
    def blob_read_bytes(self) -> int:
        """Bytes :meth:`read_blob` returned (for benchmarks)."""
        return self.blobs.blob_read_bytes

    @blob_read_bytes.setter
    def blob_read_bytes(self, value: int) -> None:
        self.blobs.blob_read_bytes = value

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
            await conn.execute(sql.SET_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)).encode())
            return conn
        except psycopg.Error as exc:
            raise translate(exc) from exc

    async def open(self) -> None:
        """Connect, create or migrate the schema, start the writer and the listener."""
        if self._writer is not None:
            return
        conn = await self._connect()
        try:
            await migrate(conn, self.url)
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
        self._writer = Writer(conn, self._connect, self._instance, self.limits)
        self._start_listener()
        await self.blobs.sweep_blobs()  # what puts that never finished left more than an hour ago

    def _start_listener(self) -> None:
        """Listen (one more connection) only when someone wants the hints: a runtime
        does, a one-shot command (``dormant status``) does not."""
        if self.listen and self._subscribers and self._writer is not None and self._listener is None:
            self._listener = asyncio.create_task(self._listen_loop(), name="dormant-pg-listener")

    async def close(self) -> None:
        """Let queued writes finish, stop the writer and listener, close connections."""
        if self._writer is None:
            return
        writer = self._writer
        await writer.close()
        self._writer = None
        self._commits += writer.commits
        self._retries += writer.retries
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

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
                    await conn.execute(sql.LISTEN.format(channel=channel).encode())
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

    # -- writes and reads ------------------------------------------------------------

    async def _write(self, job: Job, size: int = 256) -> Any:
        if self._writer is None:
            raise StoreError("the store is not open")
        return await self._writer.submit(job, size)

    def _reads(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise StoreError("the store is not open")
        return self._pool

    async def _rows(self, statement: str, params: Sequence[Any] | Mapping[str, Any] = ()) -> Rows:
        try:
            async with self._reads().connection() as conn:
                return await (await conn.execute(statement, params)).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    # -- threads ---------------------------------------------------------------------

    async def create_thread(self, thread_id: str, agent: str) -> Thread:
        """Create a thread if missing; return the stored row."""
        job = Job(
            sql.CREATE_THREAD,
            (thread_id, agent, self.clock()),
            lambda rows, _: row_thread(rows[0]),
            threads=(thread_id,),
        )
        result: Thread = await self._write(job)
        return result

    async def get_thread(self, thread_id: str) -> Thread:
        """The thread's row; NotFound if missing."""
        rows = await self._rows(sql.GET_THREAD, (thread_id,))
        if not rows:
            raise NotFound(f"no thread {thread_id!r}")
        return row_thread(rows[0])

    async def retry_thread(self, thread_id: str) -> Thread:
        """Reactivate a failed thread."""

        def decode(rows: Rows, count: int) -> Thread:
            if not rows:
                raise NotFound(f"no thread {thread_id!r}")
            return row_thread(rows[0])

        job = Job(
            sql.RETRY_THREAD,
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

        job = Job(
            sql.ADMIT,
            (encode(items), keys, now),
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

        result: list[Claim] = await self._write(Job(sql.CLAIM_THREADS, params, decode))
        return result

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """Thread row, bounded view and ready inputs of a claimed thread."""
        try:
            async with self._reads().connection() as conn:
                cursor = await conn.execute(
                    sql.LOAD_SLICE, {"id": claim.thread_id, "now": self.clock(), "limit": limits.max_inputs}
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
                    view, summary, inherited = await load_view(conn, thread, limits)
                    self.views.put(thread, limits, view, summary, inherited)
                else:
                    view, summary, inherited = cached
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return SliceLoad(thread=thread, view=view, inputs=tuple(inputs), summary=summary, inherited=inherited)

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a slice plan atomically; LeaseLost if the lease is gone."""
        messages = plan.messages
        if any(m.seq != messages[0].seq + n for n, m in enumerate(messages)):
            raise StoreError(f"the messages of a plan of {plan.thread_id!r} are not numbered in order")
        inbox.validate(plan.admissions, self.max_input_bytes)
        now = self.clock()
        keys = [inbox.sort_key(item, now) for item in plan.admissions]
        params = (encode(plan), keys, now)
        job = Job(
            sql.COMMIT_SLICE,
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
        await self._write(Job(sql.RELEASE, params, _none, threads=(claim.thread_id,)))

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend held leases; return the renewed claims."""
        if not claims:
            return []
        expires = self.clock() + lease_s

        def decode(rows: Rows, count: int) -> list[Claim]:
            held = {r[0] for r in rows}
            return [msgspec.structs.replace(c, expires_at=expires) for c in claims if c.thread_id in held]

        ids = [c.thread_id for c in claims]
        job = Job(sql.RENEW_LEASES, (expires, ids, [c.token for c in claims]), decode, threads=ids)
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

        result: list[OutboxEntry] = await self._write(Job(sql.CLAIM_OUTBOX, params, decode))
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

        job = Job(
            sql.COMPLETE_CALL,
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
        params = (encode(outcomes), now, _result_key(now))
        job = Job(
            sql.FINISH_OUTBOX,
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
            statement = sql.HISTORY_NEWEST_FIRST
        else:
            after = seq_cursor(cursor, default=0)
            statement = sql.HISTORY_OLDEST_FIRST
        try:
            async with self._reads().connection() as conn:
                known = await (await conn.execute(sql.THREAD_EXISTS, (thread_id,))).fetchone()
                if known is None:
                    raise NotFound(f"no thread {thread_id!r}")
                rows = await (await conn.execute(statement, (thread_id, after, limit + 1))).fetchall()
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        items = tuple(row_message(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].seq) if more and items else None)

    async def list_threads(self, *, cursor: str | None = None, limit: int = 50) -> Page[Thread]:
        """One page of threads by id."""
        limit = clamp_limit(limit)
        rows = await self._rows(sql.LIST_THREADS, (cursor or "", limit + 1))
        items = tuple(row_thread(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=items[-1].id if more and items else None)

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries by id."""
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=0)
        rows = await self._rows(sql.LIST_OUTBOX, (after, status, status, limit + 1))
        items = tuple(row_entry(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].id) if more and items else None)

    async def has_work(self) -> bool:
        """Ready input, a leased thread, or an open outbox entry."""
        rows = await self._rows(sql.HAS_WORK, {"now": self.clock()})
        return bool(rows[0][0])

    async def status(self) -> StoreStatus:
        """Counts and sizes for ``dormant status``."""
        now = self.clock()
        try:
            async with self._reads().connection() as conn:
                async with conn.pipeline():
                    cursors = [
                        await conn.execute(sql.STATUS_THREADS),
                        await conn.execute(sql.STATUS_READY, (now,)),
                        await conn.execute(sql.STATUS_LEASED),
                        await conn.execute(sql.STATUS_BACKLOG),
                        await conn.execute(sql.STATUS_OUTBOX),
                        await conn.execute(sql.STATUS_MESSAGES),
                        await conn.execute(sql.SCHEMA_VERSION),
                        await conn.execute(sql.TABLE_BYTES),
                    ]
                by_status, ready, leased, backlog, outbox, messages, version, size = [
                    await c.fetchall() for c in cursors
                ]
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
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

    # -- blobs and deletion (see .blobs) ---------------------------------------------

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        return await self.blobs.put_blob(thread_id, chunks)

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or an ancestor refers to it."""
        return await self.blobs.get_blob(thread_id, ref)

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """A byte range of a blob ``thread_id`` may see; only the chunks holding it are read."""
        return await self.blobs.read_blob(thread_id, ref, offset, length)

    async def sweep_blobs(self) -> int:
        """Remove the chunks of blob writes that never finished (see PostgresBlobs)."""
        return await self.blobs.sweep_blobs()

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread, its descendants, their rows and the blobs left unreferenced."""
        tree = await self.blobs.delete_thread(thread_id)
        for gone in tree:
            self.views.discard(gone)
        return len(tree)
