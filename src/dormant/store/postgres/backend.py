"""The PostgreSQL backend: many worker processes (on many hosts) share one database.

Rows only (the domain rules are the store core's): writes go through the
group-committing :class:`~.writer.Writer` (one pipelined transaction per batch, the
multi-row ones as calls of the ``dormant_*`` functions of ``schema.sql``; callers
answered after COMMIT). Claims use ``FOR NO KEY UPDATE SKIP LOCKED`` and leases with
expiry, so any number of processes claim from the same tables. ``LISTEN``/``NOTIFY``
is only a wake-up hint, on a dedicated connection (never a pooled one); the claim
query is the truth. Reads run on a small connection pool (:mod:`.reads`); blobs and
thread deletion in :mod:`.blobs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import msgspec
import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ... import inbox
from ...errors import DormantError, StoreError, UsageError
from ...records import Admission, Claim, CommitPlan, NewInput, OutboxEntry, OutboxOutcome, Thread
from ...urls import redact, scrub
from ..backend import BackendDefaults
from ..core import result_input
from ..rows import row_entry, row_thread, state_row
from . import results, sql
from .approvals import PgApprovals
from .blobs import PostgresBlobs
from .driver import Conn, Rows, clean_text, encode, translate
from .heartbeat import DbClock, Heartbeat
from .journal import PgJournal
from .memory.rows import PgMemoryRows, PostgresMemoryBackend, vector_schema
from .reads import PgReads, PgSliceReader
from .retention import PgRetention
from .schema import migrate_schema
from .tenants import PgTenants
from .writer import NOTIFY_OUTBOX, NOTIFY_THREADS, Job, Writer, WriterLimits, channels

log = logging.getLogger("dormant.store.postgres")


def _none(rows: Rows, count: int) -> None:
    return None


def _result_key(now: float) -> float:
    """Sort key of a tool result admitted at ``now`` (P1, due now)."""
    return inbox.sort_key(result_input("-", "-", None, "", False), now)


def check_url(url: str) -> None:
    """UsageError unless ``url`` is a ``postgresql://`` (or ``postgres://``) URL."""
    if not url.startswith(("postgresql://", "postgres://")):
        raise UsageError(f"not a PostgreSQL URL: {url!r} (expected postgresql://user@host/db)")


class PostgresBackend(BackendDefaults):
    """The :class:`~dormant.store.backend.Backend` on PostgreSQL (see the module doc).

    ``pool_size`` bounds the read connections of this process; the writer holds one
    more connection, and so does the listener (started by the first :meth:`subscribe`).
    """

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 8,
        batch_jobs: int = 256,
        batch_bytes: int = 8 * 1024 * 1024,
        queue_jobs: int = 20_000,
        queue_bytes: int = 64 * 1024 * 1024,
        connect_timeout_s: float = 10.0,
        lock_timeout_s: float = 10.0,
        listen: bool = True,
        clock: Callable[[], float] | None = None,
        heartbeat_s: float = 1.0,
        dead_after_s: float = 4.0,
        vectors: bool = True,
    ) -> None:
        check_url(url)
        if pool_size < 1:
            raise UsageError(f"pool_size must be at least 1, not {pool_size}")
        #: use pgvector for memory's vectors when the server has it (False: text + structure)
        self.vectors = vectors
        self._memory: PostgresMemoryBackend | None = None
        self.url = url
        self.pool_size = pool_size
        self.limits = WriterLimits(batch_jobs, batch_bytes, queue_jobs, queue_bytes)
        self.connect_timeout_s = connect_timeout_s
        self.lock_timeout_s = lock_timeout_s
        self.listen = listen
        # the database's clock unless one is given (tests): see .heartbeat
        self.db_clock = DbClock() if clock is None else None
        self.clock: Callable[[], float] = clock or self.db_clock or time.time
        self.dead_after_s = dead_after_s
        self.heartbeat = Heartbeat(self._reads, self.db_clock, heartbeat_s)
        self.blobs = PostgresBlobs(self._reads, self.clock, lock_timeout_s)
        self.reads = PgReads(self._reads, self.clock)
        # The pooled reads are that object's own methods.
        self.get_thread = self.reads.get_thread
        self.history_rows = self.reads.history_rows
        self.thread_rows = self.reads.thread_rows
        self.outbox_rows = self.reads.outbox_rows
        self.has_work = self.reads.has_work
        self.status = self.reads.status
        self.tenant_status = self.reads.tenant_status
        self.delete_threads = self.blobs.delete_threads
        self.journal = PgJournal(self.reads, self._write, self.clock)
        self.retention = PgRetention(self.reads, self._reads, self._write, self.clock, lock_timeout_s)
        self.tenants = PgTenants(self.reads, self._write)
        self.approvals = PgApprovals(self.reads, self._write, self.clock)
        self._instance = secrets.token_hex(8)  # NOTIFY payload: our own hints are ignored
        self._pool: AsyncConnectionPool[Conn] | None = None
        self._writer: Writer | None = None  # None while closed
        self._listener: asyncio.Task[None] | None = None
        self._subscribers: list[Callable[[str], None]] = []
        self._channels: dict[str, str] = {}  # known once open (they depend on the schema)
        self._commits = self._retries = 0  # of writers closed before

    @property
    def commits(self) -> int:
        """Transactions committed by the writer (for benchmarks)."""
        return self._commits + (self._writer.commits if self._writer is not None else 0)

    @property
    def retries(self) -> int:
        """Batches re-run after a deadlock or serialization failure."""
        return self._retries + (self._writer.retries if self._writer is not None else 0)

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
            self._channels = channels(await migrate_schema(conn, self.url))
            vectors = await vector_schema(conn) if self.vectors else None
            if self.db_clock is not None:
                await self.db_clock.sync(conn, samples=3)
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
                raise StoreError(
                    f"cannot open connections to PostgreSQL at {redact(self.url)!r}: {scrub(str(exc))}"
                ) from exc
        except BaseException:
            await conn.close()
            raise
        self._pool = pool
        rows = PgMemoryRows(asyncio.get_running_loop(), lambda: self._pool, vectors)
        self._memory = PostgresMemoryBackend(rows)
        self._writer = Writer(conn, self._connect, self._instance, self._channels, self.limits)
        self._start_listener()
        self.heartbeat.start()
        await self.blobs.sweep_blobs()  # what puts that never finished left more than an hour ago

    def _start_listener(self) -> None:
        """Listen (one more connection) only when someone wants the hints: a runtime
        does, a one-shot command (``dormant status``) does not."""
        if self.listen and self._subscribers and self._writer is not None and self._listener is None:
            self._listener = asyncio.create_task(self._listen_loop(), name="dormant-pg-listener")

    def memory_rows(self) -> PostgresMemoryBackend:
        """Memory's rows in this database (tables in the store's schema), through the
        store's pool (see :mod:`.memory`)."""
        if self._memory is None:
            raise StoreError("the store is not open")
        return self._memory

    async def close(self) -> None:
        """Let queued writes finish, stop the writer and listener, close connections."""
        self._memory = None
        if self._writer is None:
            return
        writer = self._writer
        await writer.close()
        self._writer = None
        self._commits += writer.commits
        self._retries += writer.retries
        await self.heartbeat.stop()
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def subscribe(self, callback: Callable[[str], None]) -> bool:
        """Call ``callback("threads")`` / ``callback("outbox")`` when another process
        made input ready or wrote outbox entries. A hint only: it may be late or lost."""
        if not self.listen:
            return False
        self._subscribers.append(callback)
        self._start_listener()
        return True

    async def _listen_loop(self) -> None:
        """LISTEN on a dedicated connection; reconnect with backoff when it breaks."""
        delay = 0.5
        names = {channel: name for name, channel in self._channels.items()}
        while True:
            conn: Conn | None = None
            try:
                conn = await self._connect()
                for channel in self._channels.values():
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

    # -- connections -----------------------------------------------------------------

    async def _write(self, job: Job, size: int = 256) -> Any:
        if self._writer is None:
            raise StoreError("the store is not open")
        return await self._writer.submit(job, size)

    def _reads(self) -> AsyncConnectionPool[Conn]:
        if self._pool is None:
            raise StoreError("the store is not open")
        return self._pool

    @contextlib.asynccontextmanager
    async def reader(self) -> AsyncIterator[PgSliceReader]:
        """The reads of one slice load, on one pooled connection."""
        try:
            async with self._reads().connection() as conn:
                yield PgSliceReader(conn, self.clock)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc

    async def _beats_for(self, worker: str) -> None:
        """Heartbeat for ``worker`` (at once the first time: it has a row before it
        holds a lease)."""
        if self.heartbeat.wants(worker):
            await self.heartbeat.take(worker, self.dead_after_s)  # before the beats overwrite it
        if self.heartbeat.add(worker):
            await self.heartbeat.beat()

    # -- threads ---------------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, agent: str, state: Mapping[str, str] | None = None
    ) -> Thread:
        """Insert the thread row unless it exists (``state`` journaled when it is new); the stored row."""
        if state:
            items = sorted(state.items())
            params = {
                "id": thread_id,
                "agent": agent,
                "now": self.clock(),
                "keys": [k for k, _ in items],
                "values": [v for _, v in items],
            }
            params["state"], params["subject"] = state_row(state)
            size = sum(len(k) + len(v) for k, v in items) + 256
            made: Thread | None = await self._write(
                Job(sql.CREATE_THREAD_STATE, params, lambda rows, _: row_thread(rows[0]) if rows else None),
                size,
            )
            if made is not None:
                return made
            existing = await self.get_thread(thread_id)
            assert existing is not None  # the insert found it
            return existing
        job = Job(
            sql.CREATE_THREAD,
            (thread_id, agent, self.clock()),
            lambda rows, _: row_thread(rows[0]),
            threads=(thread_id,),
        )
        result: Thread = await self._write(job)
        return result

    async def retry_thread(self, thread_id: str) -> Thread | None:
        """Reactivate a failed thread; the new row, None if missing."""
        job = Job(
            sql.RETRY_THREAD,
            {"id": thread_id, "now": self.clock()},
            lambda rows, _: row_thread(rows[0]) if rows else None,
            threads=(thread_id,),
            notify=NOTIFY_THREADS,
        )
        result: Thread | None = await self._write(job)
        return result

    # -- admission and slices --------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Insert inputs in one transaction (``dormant_admit_v2``: their parts too)."""
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
            notify=NOTIFY_THREADS,
        )
        size = sum(len(item.content) for item in items) + 256 * len(items)
        result: list[Admission] = await self._write(job, size)
        return result

    async def claim_threads(
        self, worker: str, limit: int, lease_s: float, token: str, agents: list[str] | None, cap: int
    ) -> list[Claim]:
        """Lease up to ``limit`` ready threads, fair across tenants (SKIP LOCKED), the
        leases of dead workers included."""
        await self._beats_for(worker)
        now = self.clock()
        expires = now + lease_s
        params = {
            "now": now,
            "limit": limit,
            "token": token,
            "worker": worker,
            "expires": expires,
            "dead": self.dead_after_s,
            "agents": agents,
            "cap": cap,
        }

        def decode(rows: Rows, count: int) -> list[Claim]:
            ordered = sorted(rows, key=lambda r: (r[1], r[0]))
            return [
                Claim(thread_id=r[0], token=token, expires_at=expires, agent=r[2], attempts=r[3])
                for r in ordered
            ]

        result: list[Claim] = await self._write(Job(sql.CLAIM_THREADS, params, decode))
        return result

    async def apply_plan(self, plan: CommitPlan) -> None:
        """Apply a checked plan in one transaction (``dormant_commit_slice_parts``)."""
        now = self.clock()
        keys = [inbox.sort_key(item, now) for item in plan.admissions]
        if plan.memory is not None:
            await self._apply_with_memory(plan, keys, now)
            return
        job = Job(
            sql.COMMIT_SLICE,
            (encode(plan), keys, now),
            _none,
            threads=[plan.thread_id, *(a.thread_id for a in plan.admissions)],
            notify=(NOTIFY_OUTBOX if plan.calls else 0) | (NOTIFY_THREADS if plan.admissions else 0),
        )
        size = sum(len(m.content) + len(m.reasoning or "") for m in plan.messages)
        size += sum(len(a.content) for a in plan.admissions) + sum(len(c.value or "") for c in plan.state)
        if plan.summary is not None:
            size += len(plan.summary.content)
        await self._write(job, size + 512)

    async def _apply_with_memory(self, plan: CommitPlan, keys: list[float], now: float) -> None:
        """A plan that carries memory writes: one transaction on a pooled connection (the
        memory rules read, then write, which the writer's pipelined batches cannot hold):
        the thread rows locked in id order as the writer does, ``dormant_commit_slice``,
        the memory rows, the wake-up hints. A deadlock re-runs it whole."""
        memory = self.memory_rows()
        writes = plan.memory
        assert writes is not None
        threads = sorted({plan.thread_id, *(a.thread_id for a in plan.admissions)})
        hints = [
            sql.NOTIFY.format(channel=self._channels[name], instance=self._instance)
            for name, wanted in (("threads", bool(plan.admissions)), ("outbox", bool(plan.calls)))
            if wanted
        ]
        encoded = encode(msgspec.structs.replace(plan, memory=None))

        async def job(c: Conn) -> None:
            await c.execute(sql.SET_LOCAL_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)).encode())
            await c.execute(sql.LOCK_THREADS, (threads, []))
            await c.execute(sql.COMMIT_SLICE, (encoded, keys, now))
            await memory.in_commit(c, writes)
            if hints:
                await c.execute(f"SELECT {', '.join(hints)}".encode())

        await memory.rows.transaction(job)

    async def store_counts(self, counts: Sequence[tuple[str, int, int]]) -> None:
        """Write back token counts made on read (one statement, in the next batch)."""
        ids = sorted({c[0] for c in counts})
        params = ([c[0] for c in counts], [c[1] for c in counts], [c[2] for c in counts])
        await self._write(Job(sql.STORE_COUNTS, params, _none, threads=ids), 64 * len(counts))

    async def release(
        self, claim: Claim, *, retry_at: float, error: str | None, fail: bool, wait: str | None = None
    ) -> None:
        """Clear the lease if ``claim`` still holds it."""
        params = {
            "wait": clean_text(wait),
            "retry_at": retry_at,
            "inc": 0 if error else -1,
            "error": clean_text(error),
            "fail": fail,
            "now": self.clock(),
            "id": claim.thread_id,
            "token": claim.token,
        }
        await self._write(Job(sql.RELEASE, params, _none, threads=(claim.thread_id,)))

    async def wake_waiting(self, endpoint: str) -> int:
        """Threads waiting on ``endpoint`` claimable now; how many."""
        params = {"now": self.clock(), "endpoint": clean_text(endpoint)}
        job = Job(sql.WAKE_WAITING, params, lambda rows, count: count, notify=NOTIFY_THREADS)
        woken: int = await self._write(job)
        return woken

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend the leases still held; the renewed claims."""
        expires = self.clock() + lease_s

        def decode(rows: Rows, count: int) -> list[Claim]:
            held = {r[0] for r in rows}
            return [msgspec.structs.replace(c, expires_at=expires) for c in claims if c.thread_id in held]

        ids = [c.thread_id for c in claims]
        job = Job(sql.RENEW_LEASES, (expires, ids, [c.token for c in claims]), decode, threads=ids)
        result: list[Claim] = await self._write(job)
        return result

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(
        self, worker: str, limit: int, lease_s: float, token: str, tools: list[str] | None
    ) -> list[OutboxEntry]:
        """Reconcile expired running entries (and those of dead workers), then lease due
        pending ones."""
        await self._beats_for(worker)
        now = self.clock()
        params = (
            worker,
            limit,
            token,
            now,
            now + lease_s,
            _result_key(now),
            inbox.UNKNOWN_OUTCOME,
            self.dead_after_s,
            tools,
        )

        def decode(rows: Rows, count: int) -> list[OutboxEntry]:
            return sorted((row_entry(r) for r in rows), key=lambda e: e.id)

        result: list[OutboxEntry] = await self._write(Job(sql.CLAIM_OUTBOX, params, decode))
        return result

    async def resolve_call(self, entry_id: int) -> OutboxEntry | None:
        """Delete a dead-lettered or unknown entry; its row, None if missing or another status."""
        job = Job(sql.RESOLVE_CALL, (entry_id,), lambda rows, _: row_entry(rows[0]) if rows else None)
        result: OutboxEntry | None = await self._write(job)
        return result

    async def complete_call(self, item: NewInput) -> Admission:
        """Answer an open call with ``item`` (``dormant_complete_call``)."""
        now = self.clock()

        def decode(rows: Rows, count: int) -> Admission:
            return Admission(
                input_id=rows[0][0], thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=rows[0][1]
            )

        params = (item.thread_id, item.call_id, item.content, item.is_error, now, inbox.sort_key(item, now))
        job = Job(sql.COMPLETE_CALL, params, decode, threads=(item.thread_id,), notify=NOTIFY_THREADS)
        result: Admission = await self._write(job, len(item.content) + 256)
        return result

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the tool result in the same transaction (a
        result with parts by a statement of its own, :mod:`.results`)."""
        now = self.clock()
        if any(o.parts for o in outcomes):
            held: list[bool] = []
            for o in outcomes:
                if not o.parts:
                    held += await self.finish_outbox([o])
                    continue
                size = len(o.content) + 512 * len(o.parts) + 256
                held += await self._write(results.finish_with_parts(o, now, _result_key(now)), size)
            return held
        job = Job(
            sql.FINISH_OUTBOX,
            (
                encode([msgspec.structs.replace(o, error=clean_text(o.error)) for o in outcomes]),
                now,
                _result_key(now),
            ),
            lambda rows, _: [bool(r[0]) for r in rows],
            entries=[o.entry_id for o in outcomes],
            notify=NOTIFY_THREADS if any(o.kind != "retry" for o in outcomes) else 0,
        )
        result: list[bool] = await self._write(job, sum(len(o.content) for o in outcomes) + 256)
        return result
