"""The SQLite backend: one file, WAL, one group-committing writer, a reader connection.

Why apsw rather than the stdlib ``sqlite3``: it bundles a current SQLite (3.54;
the system library here is 3.40), it can load extensions (sqlite-vec for the
memory index) and it gives explicit transaction control with no hidden BEGINs.

Every write is a job (:mod:`~dormant.store.sqlite.jobs`,
:mod:`~dormant.store.sqlite.outbox`, :mod:`~dormant.store.sqlite.blobs`) for the
:class:`~dormant.store.sqlite.writer.GroupWriter`, which commits many of them in
one transaction and answers each caller only after that commit. API reads
(history, status, ...) use their own connection (WAL readers do not block the
writer). A slice's reads use the writer's connection while the writer runs on the
event loop's thread, between batches: its page cache survives its own commits,
where a reader's is dropped at each one. A claim batch's slices are loaded in one
statement (:mod:`~dormant.store.sqlite.reader`). The statements live in
:mod:`~dormant.store.sqlite.sql`.

``memory://`` is the same backend on a private in-memory database (one connection).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import apsw
import msgspec

from ...errors import SchemaError, StoreError, StoreFull, UsageError
from ...records import (
    READY_AGENTS_SHOWN,
    Admission,
    Claim,
    CommitPlan,
    Message,
    NewInput,
    OutboxEntry,
    OutboxOutcome,
    StoreStatus,
    Thread,
)
from .. import fairness
from ..backend import BackendDefaults
from ..rows import row_entry, row_message, row_thread, state_row
from . import jobs, journal_sql, outbox, sql
from .approvals import SQLiteApprovals
from .blobs import SQLiteBlobs
from .connect import MEMORY_SCHEME, connect, file_size, memory_name, migrate_schema, path_from_url, translate
from .journal import SQLiteJournal
from .memory.rows import MemoryRows
from .owners import WorkerLocks
from .reader import ClaimBatches, SQLiteReader, model_figures
from .retention import SQLiteRetention
from .tenants import SQLiteTenants
from .writer import Conn, GroupWriter, Job

if TYPE_CHECKING:
    from ..health import Report

#: Page cache of the writer connection, which also serves the slices' reads: the hot
#: pages of threads, inputs and the message index (SQLite's default is 2,000 KiB). Pages
#: it misses come from the OS's file cache: agent_scale ran as fast at 2 MiB as at 8,
#: with 6 MiB less RSS from the first wave on (BENCHMARKS.md, "A million agents").
WRITER_CACHE_KIB = 2048
#: Page cache of the reader connection. It serves only API reads (history, status,
#: has_work) and loses its pages whenever the writer commits, so a big cache buys
#: nothing; left at the default it filled up slowly as the threads table grew
#: (has_work scans it), which showed as RSS creeping with the number of agents.
READER_CACHE_KIB = 256
#: How often claims look for dead workers' lock files (see owners.py): what a kill -9
#: costs the threads its worker held, at most (plus a poll), instead of a whole lease.
RECOVER_EVERY_S = 0.25

log = logging.getLogger("dormant.store")


class SQLiteBackend(BackendDefaults):
    """The embedded default backend (``sqlite:///path``) and the in-RAM baseline (``memory://``)."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        page_size: int = 16384,
        writer_thread: bool = False,
        batch_jobs: int = 512,
        batch_bytes: int = 8 * 1024 * 1024,
        queue_jobs: int = 20_000,
        queue_bytes: int = 64 * 1024 * 1024,
        max_page_count: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise UsageError(f"synchronous must be NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.url = url
        self.memory = url.startswith(MEMORY_SCHEME)
        self._path = None if self.memory else path_from_url(url)
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self.page_size = page_size
        self.writer_thread = writer_thread and not self.memory
        self.batch_jobs = batch_jobs
        self.batch_bytes = batch_bytes
        self.queue_jobs = queue_jobs
        self.queue_bytes = queue_bytes
        # a cap on the file's size in pages: past it writes fail with StoreFull (a quota,
        # and how the fault tests fill the "disk"); see set_max_page_count
        self.max_page_count = max_page_count
        self.clock = clock
        self._reader: Conn | None = None
        self._writer: Conn | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._writer_queue: GroupWriter | None = None
        self._closing = False
        self._batches = ClaimBatches()
        self.blobs = SQLiteBlobs(self._write, self._read, clock)
        self.memories = MemoryRows(self._write, self._read)  # long-term memory's rows
        self.memory_rows = self.memories.rows
        self.journal = SQLiteJournal(self._write, self._query, clock)
        self.retention = SQLiteRetention(self._write, self._query, clock)
        self.tenants = SQLiteTenants(self._write, self._query, clock)
        self.approvals = SQLiteApprovals(self._write, self._query, clock)
        # the lock files that prove workers of this file alive (files only)
        self._locks = WorkerLocks(self._path) if self._path is not None else None
        self._next_recovery = 0.0

    # -- abilities -------------------------------------------------------------------

    @property
    def path(self) -> str | None:
        """The database file (None for ``memory://``)."""
        return self._path

    @property
    def persistent(self) -> bool:
        """A file outlives the process; ``memory://`` does not."""
        return not self.memory

    @property
    def commits(self) -> int:
        """Transactions committed by the writer (for benchmarks)."""
        return self._writer_queue.commits if self._writer_queue else 0

    async def exists(self) -> bool:
        """Whether the database file exists (``memory://``: never before it is opened)."""
        return self._path is not None and os.path.exists(self._path)

    def diagnose(self, *, quick: bool, now: float, stuck_after_s: float) -> Report:
        """``dormant doctor`` on the file, read-only and without opening the store."""
        if self._path is None:
            raise UsageError(
                "memory:// keeps nothing between processes: there is nothing for doctor to examine"
            )
        from .judge import diagnose

        return diagnose(self.url, self._path, quick=quick, now=now, stuck_after_s=stuck_after_s)

    async def release_caches(self) -> int:
        """Free what SQLite can of each connection's page cache (apsw
        ``Connection.release_memory``, i.e. ``sqlite3_db_release_memory``); how many
        connections released memory (0 when the store is closed).

        A writer on its own thread is released on that thread, between batches (never
        while a batch uses the connection); the others run on the event loop's thread.
        """
        released = 0
        conns: list[Conn] = []
        for candidate in (self._writer, self._reader):  # memory://: one connection for both
            if candidate is not None and all(candidate is not c for c in conns):
                conns.append(candidate)
        for conn in conns:
            if self._closing or self._writer_queue is None:
                break  # closed meanwhile: its connections hold nothing any more
            release: Callable[[], None] = conn.release_memory
            try:
                if self._executor is not None and self._writer is conn:
                    await asyncio.get_running_loop().run_in_executor(self._executor, release)
                else:
                    release()
            except apsw.Error as exc:
                raise translate(exc) from exc
            released += 1
        return released

    # -- lifecycle -------------------------------------------------------------------

    def _connect(self, name: str, cache_kib: int) -> apsw.Connection:
        return connect(
            name,
            memory=self.memory,
            page_size=self.page_size,
            cache_kib=cache_kib,
            synchronous=self.synchronous,
            busy_timeout_ms=self.busy_timeout_ms,
            max_page_count=self.max_page_count,
        )

    async def open(self) -> None:
        """Open connections, create or migrate the schema, start the writer."""
        if self._writer_queue is not None:
            return
        if self._path is not None:
            directory = os.path.dirname(os.path.abspath(self._path))
            if not os.path.isdir(directory):
                raise UsageError(f"directory {directory!r} of the database does not exist")
        name = self._path if self._path is not None else memory_name()
        try:
            self._writer = self._connect(name, WRITER_CACHE_KIB)
        except SchemaError as exc:
            raise self._damaged(exc) from exc.__cause__
        try:
            await migrate_schema(self._writer, repr(self._path or self.url))
        except BaseException as exc:
            self._writer.close()
            self._writer = None
            if isinstance(exc, SchemaError):
                raise self._damaged(exc) from exc.__cause__
            raise
        # memory://: one connection serves writes and reads (nothing runs between a
        # batch's statements: the writer runs on the event loop's thread)
        self._reader = self._writer if self.memory else self._connect(name, READER_CACHE_KIB)
        if self.writer_thread:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dormant-writer")
        self._closing = False
        self._writer_queue = GroupWriter(
            self._writer,
            executor=self._executor,
            batch_jobs=self.batch_jobs,
            batch_bytes=self.batch_bytes,
            queue_jobs=self.queue_jobs,
            queue_bytes=self.queue_bytes,
        )
        self.memories.open(
            (self._writer, self._reader),
            None if self.memory else lambda: self._connect(name, READER_CACHE_KIB),
        )
        await self.memories.upgrade()  # memory's indexes a file of an older version lacks
        await self.blobs.sweep_blobs()  # what puts that never finished left more than an hour ago
        await self.recover()  # the leases of workers that died before this open

    def _damaged(self, exc: SchemaError) -> SchemaError:
        """``exc``, reworded to say what to do when the file itself is damaged."""
        if not isinstance(exc.__cause__, apsw.CorruptError | apsw.NotADBError):
            return exc  # e.g. a schema newer than this dormant: its message says what to do
        return SchemaError(
            f"cannot open {self._path!r}: the database file is damaged ({exc.__cause__}). Stop every "
            f"dormant process using it, run `dormant doctor --store {self.url}` to see what is "
            f"damaged, then restore the file from a backup (or salvage what is readable with "
            f"`sqlite3 {self._path} .recover`)"
        )

    async def set_max_page_count(self, pages: int | None) -> int:
        """Change the size cap of the file (None: SQLite's maximum); returns the cap in force.

        Lowering it below the current size caps it at the current size. Raising it is
        how space is "freed" when the cap was what filled the store.
        """
        self.max_page_count = pages
        limit = 0xFFFFFFFE if pages is None else int(pages)

        def job(conn: Conn) -> int:
            return int(conn.execute(sql.PRAGMA_MAX_PAGE_COUNT.format(limit)).fetchone()[0])

        try:
            result: int = await self._write(job)
        except StoreFull:
            # The pragma is not transactional: it took effect on the connection even though
            # the group commit it shared with other writes failed for want of space (the very
            # condition a raised cap cures). Its batch-mates failed alone; ask again, in a
            # batch that can now commit, for the cap in force.
            result = await self._write(job)
        return result

    async def close(self) -> None:
        """Let queued writes finish, stop the writer, close connections."""
        if self._writer_queue is None:
            return
        self._closing = True
        await self._writer_queue.close()
        self._writer_queue = None
        if self._locks is not None:
            self._locks.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.memories.close()
        for conn in {id(c): c for c in (self._reader, self._writer) if c is not None}.values():
            conn.close()
        self._reader = self._writer = None  # memory's rows, on _write and _read, fail from now on
        self._batches.clear()

    # -- dead workers ----------------------------------------------------

    async def _alive(self, worker: str) -> None:
        """Hold ``worker``'s lock file (before it holds a lease) and, at most every
        :data:`RECOVER_EVERY_S`, release the leases of workers proven dead."""
        if self._locks is None:
            return
        self._locks.hold(worker)
        if time.monotonic() >= self._next_recovery:
            await self.recover()

    async def recover(self) -> int:
        """Let the leases of workers proven dead (their lock files free: see
        :mod:`~dormant.store.sqlite.owners`) expire now; how many leases that was."""
        if self._locks is None:
            return 0
        self._next_recovery = time.monotonic() + RECOVER_EVERY_S
        with self._locks.dead() as dead:
            if not dead:
                return 0
            count: int = await self._write(lambda conn: jobs.expire_leases_of(conn, dead))
        log.warning("dead_workers_released", extra={"workers": dead[:8], "leases": count})
        return count

    # -- connections -----------------------------------------------------------------

    async def _write(self, job: Job, size: int = 256) -> Any:
        if self._writer_queue is None or self._closing:
            raise StoreError("the store is not open")
        return await self._writer_queue.submit(job, size)

    def _read(self) -> Conn:
        if self._reader is None:
            raise StoreError("the store is not open")
        return self._reader

    def reader(self) -> SQLiteReader:
        """The reader of a slice: on the writer's connection, unless it runs on its own thread.

        A WAL reader drops its whole page cache whenever another connection has
        committed since its last read, i.e. after every group commit here; the
        writer's cache survives its own commits, so the pages of hot threads and
        inputs stay cached. With the writer on the event loop's thread (the default)
        no batch runs while a slice reads, and between batches the writer holds no
        transaction, so it reads committed state, as the reader would.
        """
        writer = self._writer
        if self._executor is None and writer is not None and not writer.in_transaction:
            return SQLiteReader(writer, self._batches, self.clock)
        return SQLiteReader(self._read(), self._batches, self.clock)

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        """Rows of one read on the API connection."""
        try:
            rows: list[Any] = self._read().execute(statement, params).fetchall()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return rows

    # -- threads ---------------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, agent: str, state: Mapping[str, str] | None = None
    ) -> Thread:
        """Insert the thread unless it exists (``state`` journaled when it is new); the stored row."""
        now = self.clock()
        changes = [
            (thread_id, n, "add", k, v, 0, now, 0)
            for n, (k, v) in enumerate(sorted((state or {}).items()), 1)
        ]

        row = state_row(state) if state else None

        def job(conn: Conn) -> Thread | None:
            if jobs.insert_thread(conn, thread_id, agent, now) and row is not None:
                conn.executemany(journal_sql.INSERT_CHANGE, changes)
                conn.execute(sql.SET_THREAD_STATE, (*row, thread_id))
            return jobs.get_thread(conn, thread_id)

        result: Thread = await self._write(job, 256 + sum(len(k) + len(v) for k, v in (state or {}).items()))
        return result

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread's row, None if missing."""
        rows = self._query(sql.GET_THREAD, (thread_id,))
        return row_thread(rows[0]) if rows else None

    async def retry_thread(self, thread_id: str) -> Thread | None:
        """Reactivate a thread; its new row, None if missing."""
        now = self.clock()
        result: Thread | None = await self._write(lambda conn: jobs.retry_thread(conn, thread_id, now))
        return result

    async def delete_threads(self, thread_id: str) -> list[str]:
        """Delete a thread's tree and what only it refers to."""
        result: list[str] = await self._write(
            lambda conn: jobs.delete_threads(conn, thread_id, self.clock()), 4096
        )
        return result

    # -- admission and slices --------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Insert inputs, one transaction for the batch."""
        now = self.clock()
        size = sum(len(item.content) for item in items) + 256 * len(items)
        result: list[Admission] = await self._write(
            lambda conn: [jobs.admit_one(conn, item, now) for item in items], size
        )
        return result

    async def claim_threads(
        self, worker: str, limit: int, lease_s: float, token: str, agents: list[str] | None, cap: int
    ) -> list[Claim]:
        """Lease up to ``limit`` ready threads, fair across tenants."""
        await self._alive(worker)
        hosted = None if agents is None else msgspec.json.encode(agents)

        def job(conn: Conn) -> list[Claim]:
            now = self.clock()
            tenants = [r[0] for r in conn.execute(sql.READY_TENANTS)]
            if not tenants:
                return []
            held: dict[str, int] = {}
            if len(tenants) > 1 or cap > 0:  # alone and uncapped, its leases change no place
                held = dict(conn.execute(sql.LEASES_BY_TENANT, (now,)).fetchall())
            candidates = {}
            for tenant in tenants:
                room = fairness.room(held.get(tenant, 0), limit, cap)
                if room > 0:
                    params = {"tenant": tenant, "now": now, "limit": room, "agents": hosted}
                    candidates[tenant] = conn.execute(sql.TENANT_CLAIMABLE, params).fetchall()
            ids = fairness.pick(candidates, held, limit, cap)
            if not ids:
                return []
            expires = now + lease_s
            lease = {
                "token": token,
                "worker": worker,
                "expires": expires,
                "ids": msgspec.json.encode(ids).decode(),
            }
            return [
                Claim(thread_id=r[0], token=token, expires_at=expires, agent=r[1], attempts=r[2])
                for r in conn.execute(sql.LEASE_THREADS, lease).fetchall()
            ]

        result: list[Claim] = await self._write(job)
        self._batches.claimed(result)
        return result

    async def apply_plan(self, plan: CommitPlan) -> None:
        """Apply a slice plan in one transaction."""
        now = self.clock()
        size = sum(len(m.content) + len(m.reasoning or "") for m in plan.messages) + 512
        size += sum(len(c.value or "") for c in plan.state)
        if plan.summary is not None:
            size += len(plan.summary.content)
        if plan.memory is None:
            await self._write(lambda conn: jobs.apply_plan(conn, plan, now), size)
            return
        memory = self.memory_rows().in_commit(plan.memory)

        def job(conn: Conn) -> None:
            jobs.apply_plan(conn, plan, now)
            memory(conn)  # the slice's memories, in the same transaction (after the lease check)

        await self._write(job, size + plan.memory.size)

    async def store_counts(self, counts: Sequence[tuple[str, int, int]]) -> None:
        """Write back token counts made on read (one statement, in the next batch)."""
        rows = [(tokens, thread_id, seq) for thread_id, seq, tokens in counts]
        await self._write(lambda conn: conn.executemany(sql.STORE_COUNTS, rows), 64 * len(rows))

    async def release(
        self, claim: Claim, *, retry_at: float, error: str | None, fail: bool, wait: str | None = None
    ) -> None:
        """Give a lease back without committing."""
        now = self.clock()
        await self._write(lambda conn: jobs.release(conn, claim, now, retry_at, error, fail, wait))

    async def wake_waiting(self, endpoint: str) -> int:
        """Threads waiting on ``endpoint`` claimable now; how many."""

        def wake(conn: Conn) -> int:
            conn.execute(sql.WAKE_WAITING, (self.clock(), endpoint))
            return int(conn.changes())

        woken: int = await self._write(wake)
        return woken

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend held leases; the renewed claims."""
        result: list[Claim] = await self._write(lambda conn: jobs.renew(conn, claims, self.clock() + lease_s))
        return result

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(
        self, worker: str, limit: int, lease_s: float, token: str, tools: list[str] | None
    ) -> list[OutboxEntry]:
        """Reconcile expired running entries, then lease due pending ones."""
        await self._alive(worker)
        result: list[OutboxEntry] = await self._write(
            lambda conn: outbox.claim(conn, worker, limit, lease_s, token, self.clock(), tools)
        )
        return result

    async def complete_call(self, item: NewInput) -> Admission:
        """Answer an open call from outside."""
        now = self.clock()
        result: Admission = await self._write(
            lambda conn: outbox.complete(conn, item, now), len(item.content) + 256
        )
        return result

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the result in the same transaction."""
        now = self.clock()
        size = sum(len(o.content) for o in outcomes) + 256
        result: list[bool] = await self._write(lambda conn: outbox.finish(conn, outcomes, now), size)
        return result

    async def resolve_call(self, entry_id: int) -> OutboxEntry | None:
        """Delete a dead-lettered or unknown entry; its row, None if missing or another status."""
        rows = await self._write(lambda conn: conn.execute(sql.RESOLVE_CALL, (entry_id,)).fetchall())
        return row_entry(rows[0]) if rows else None

    # -- reads -----------------------------------------------------------------------

    async def history_rows(
        self, thread_id: str, after: int, limit: int, newest_first: bool, max_bytes: int | None = None
    ) -> list[Message] | None:
        """Messages after (before) ``after``, bounded by ``max_bytes``; None if the thread is missing."""
        if not self._query(sql.THREAD_EXISTS, (thread_id,)):
            return None
        if max_bytes is None:
            statement = sql.HISTORY_DESC if newest_first else sql.HISTORY_ASC
            rows = self._query(statement, (thread_id, after, limit))
        else:
            statement = sql.HISTORY_DESC_BYTES if newest_first else sql.HISTORY_ASC_BYTES
            rows = self._query(statement, (thread_id, after, limit, max_bytes))
        return [row_message(r) for r in rows]

    async def thread_rows(self, after: str, limit: int) -> list[Thread]:
        """Threads after ``after`` by id."""
        return [row_thread(r) for r in self._query(sql.THREAD_PAGE, (after, limit))]

    async def outbox_rows(self, status: str | None, after: int, limit: int) -> list[OutboxEntry]:
        """Outbox entries after ``after`` by id."""
        return [row_entry(r) for r in self._query(sql.OUTBOX_PAGE, (after, status, limit))]

    async def has_work(self, agents: list[str] | None = None) -> bool:
        """Ready input (of ``agents``' threads, when given), a leased thread, or an open call."""
        names = None if agents is None else msgspec.json.encode(agents)
        return bool(self._query(sql.HAS_WORK, (self.clock(), names))[0][0])

    async def status(self) -> StoreStatus:
        """Counts and sizes for ``dormant status``."""
        now = self.clock()
        outbox_counts = dict(self._query(sql.OUTBOX_BY_STATUS))
        return StoreStatus(
            threads_by_status=dict(self._query(sql.THREADS_BY_STATUS)),
            threads_ready=self._query(sql.THREADS_READY, (now,))[0][0],
            threads_leased=self._query(sql.THREADS_LEASED)[0][0],
            backlog_by_priority={f"P{p}": n for p, n in self._query(sql.INPUTS_BY_PRIORITY)},
            outbox_by_status=outbox_counts,
            dead_letters=outbox_counts.get("dead", 0),
            messages=self._query(sql.MESSAGE_COUNT)[0][0],
            db_bytes=file_size(self._path),
            wal_bytes=file_size(self._path + "-wal" if self._path else None),
            schema_version=self._query(sql.GET_VERSION)[0][0],
            ready_by_agent=dict(self._query(sql.READY_BY_AGENT, (now, now, READY_AGENTS_SHOWN))),
            **model_figures(self._query, None),
        )

    async def tenant_status(self, tenant: str) -> StoreStatus:
        """One tenant's counts; no sizes."""
        t = (tenant,)
        outbox_counts = dict(self._query(sql.TENANT_OUTBOX_BY_STATUS, t))
        return StoreStatus(
            threads_by_status=dict(self._query(sql.TENANT_THREADS_BY_STATUS, t)),
            threads_ready=self._query(sql.TENANT_THREADS_READY, (tenant, self.clock()))[0][0],
            threads_leased=self._query(sql.TENANT_THREADS_LEASED, t)[0][0],
            backlog_by_priority={f"P{p}": n for p, n in self._query(sql.TENANT_INPUTS_BY_PRIORITY, t)},
            outbox_by_status=outbox_counts,
            dead_letters=outbox_counts.get("dead", 0),
            messages=self._query(sql.TENANT_MESSAGE_COUNT, t)[0][0],
            db_bytes=0,
            wal_bytes=0,
            schema_version=self._query(sql.GET_VERSION)[0][0],
            **model_figures(self._query, tenant),
        )

    # -- blobs -----------------------------------------------------------------------
