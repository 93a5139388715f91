"""The SQLite backend: one file, WAL, one group-committing writer, a reader connection.

Why apsw rather than the stdlib ``sqlite3``: it bundles a current SQLite (3.54;
the system library here is 3.40), it can load extensions (sqlite-vec for the
memory index) and it gives explicit transaction control with no hidden BEGINs.

Every write is a job for the :class:`~dormant.store.sqlite_writer.GroupWriter`,
which commits many of them in one transaction and answers each caller only after
that commit. API reads (history, status, ...) use their own connection (WAL
readers do not block the writer). A slice's reads use the writer's connection
while the writer runs on the event loop's thread, between batches: its page
cache survives its own commits, where a reader's is dropped at each one. A claim
batch's slices are loaded in one statement (see ``_slice_rows``). The statements
live in :mod:`~dormant.store.sqlite_sql`.
"""

from __future__ import annotations

import os
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any

import apsw
import msgspec

from .. import inbox
from ..cache import ViewCache
from ..context import build_view, message_bytes
from ..errors import LeaseLost, NotFound, SchemaError, StoreError, UsageError
from ..records import (
    Admission,
    Claim,
    CommitPlan,
    Input,
    Message,
    NewInput,
    OutboxEntry,
    Page,
    SliceLoad,
    StoreStatus,
    Summary,
    Thread,
    ViewLimits,
)
from .base import clamp_limit, seq_cursor
from .rows import (
    MESSAGE_COLS,
    OUTBOX_COLS,
    THREAD_COLS,
    THREAD_WIDTH,
    row_entry,
    row_input,
    row_message,
    row_summary,
    row_thread,
)
from .sqlite_blobs import SQLiteBlobs
from .sqlite_outbox import SQLiteOutbox
from .sqlite_sql import (
    CLAIM_THREADS,
    FINISH_SLICE,
    INSERT_CALL,
    INSERT_INPUT,
    INSERT_MESSAGE,
    INSERT_SUMMARY,
    LOAD_SLICE,
    LOAD_SLICES,
    MARK_READY,
    MIGRATIONS,
    NEWEST_MESSAGES,
    REFRESH_READY,
    SCHEMA_VERSION,
    SUMMARY_AT,
    SUMMARY_INHERITED,
    encode,
    file_size,
    path_from_url,
    translate,
)
from .sqlite_writer import Conn, GroupWriter, Job

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLiteStore", "translate"]

#: Page cache of the writer connection, which also serves the slices' reads: the hot
#: pages of threads, inputs and the message index (SQLite's default is 2,000 KiB).
WRITER_CACHE_KIB = 8192
#: Page cache of the reader connection. It serves only API reads (history, status,
#: has_work) and loses its pages whenever the writer commits, so a big cache buys
#: nothing; left at the default it filled up slowly as the threads table grew
#: (has_work scans it), which showed as RSS creeping with the number of agents.
READER_CACHE_KIB = 256
#: Claim batches whose slices may still load from a batch load (older ones are dropped:
#: a slice that never loads, cancelled say, must not pin its batch's rows).
CLAIM_BATCHES_KEPT = 8
#: Bytes of rows one batch load parks at most (input text plus ROW_OVERHEAD a row), so
#: parked rows never hold more than CLAIM_BATCHES_KEPT x PARKED_BYTES.
PARKED_BYTES = 2 * 1024 * 1024
ROW_OVERHEAD = 512


class SQLiteStore(SQLiteOutbox, SQLiteBlobs):
    """The embedded default store. See the module docstring for the write path."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        page_size: int = 16384,
        view_cache_bytes: int = 32 * 1024 * 1024,
        writer_thread: bool = False,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
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
        self.path = path_from_url(url)
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self.page_size = page_size
        self.views = ViewCache(view_cache_bytes)
        # statements and message bytes read to build views (a cache hit reads none)
        self.view_reads = 0
        self.view_read_bytes = 0
        self.view_read_tokens = 0
        self.writer_thread = writer_thread
        self.max_input_bytes = max_input_bytes
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
        # recent claim batches, token -> (thread ids, loaded yet). The first load_slice of
        # a batch loads the rows of all its threads in one statement and parks each
        # thread's rows here, (token, thread id) -> (max_inputs, rows), until its slice asks.
        self._batches: OrderedDict[str, tuple[list[str], bool]] = OrderedDict()
        self._loaded: dict[tuple[str, str], tuple[int, list[Any]]] = {}

    # -- lifecycle -------------------------------------------------------------------

    def _connect(self, cache_kib: int) -> apsw.Connection:
        try:
            conn = apsw.Connection(self.path)
            conn.setbusytimeout(self.busy_timeout_ms)
            # Query planner stability: without it, this SQLite (built with STAT4)
            # re-prepares a statement whenever a bound value compared with an indexed
            # column changes, i.e. on nearly every execution (measured 3-5x per query).
            conn.config(apsw.SQLITE_DBCONFIG_ENABLE_QPSG, 1)
            # only takes effect on a new file, and only before WAL mode is set
            conn.execute(f"PRAGMA page_size={self.page_size}")
            self._enable_wal(conn)
            # a fixed page cache per connection (SQLite's own heap, outside the view cache
            # budget). Set after the file is read: SQLite turns KiB into pages with the page
            # size it knows at the time, which before the first read is 4 KiB, not 16.
            conn.execute(f"PRAGMA cache_size=-{int(cache_kib)}")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            if self.max_page_count is not None:
                conn.execute(f"PRAGMA max_page_count={int(self.max_page_count)}")
            return conn
        except apsw.Error as exc:
            raise translate(exc) from exc

    def _enable_wal(self, conn: Conn) -> None:
        """Put the file in WAL mode, waiting up to the busy timeout for other processes.

        Switching a new file to WAL takes a lock that SQLite's busy handler does not
        wait for: a second process opening the same new file at the same moment gets
        SQLITE_BUSY at once (two ``dormant run`` started together, say). Retry instead.
        """
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        while True:
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                return
            except apsw.BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)

    async def open(self) -> None:
        """Open connections, create or migrate the schema, start the writer."""
        if self._writer_queue is not None:
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise UsageError(f"directory {directory!r} of the database does not exist")
        try:
            self._writer = self._connect(WRITER_CACHE_KIB)
        except SchemaError as exc:
            raise self._damaged(exc) from exc.__cause__
        try:
            self._migrate(self._writer)
        except BaseException as exc:
            self._writer.close()
            self._writer = None
            if isinstance(exc, SchemaError):
                raise self._damaged(exc) from exc.__cause__
            raise
        self._reader = self._connect(READER_CACHE_KIB)
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
        await self.sweep_blobs()  # what puts that never finished left more than an hour ago

    def _damaged(self, exc: SchemaError) -> SchemaError:
        """``exc``, reworded to say what to do when the file itself is damaged."""
        if not isinstance(exc.__cause__, apsw.CorruptError | apsw.NotADBError):
            return exc  # e.g. a schema newer than this dormant: its message says what to do
        return SchemaError(
            f"cannot open {self.path!r}: the database file is damaged ({exc.__cause__}). Stop every "
            f"dormant process using it, run `dormant doctor --store {self.url}` to see what is "
            f"damaged, then restore the file from a backup (or salvage what is readable with "
            f"`sqlite3 {self.path} .recover`)"
        )

    async def set_max_page_count(self, pages: int | None) -> int:
        """Change the size cap of the file (None: SQLite's maximum); returns the cap in force.

        Lowering it below the current size caps it at the current size. Raising it is
        how space is "freed" when the cap was what filled the store.
        """
        self.max_page_count = pages
        limit = 0xFFFFFFFE if pages is None else int(pages)

        def job(conn: Conn) -> int:
            row = conn.execute(f"PRAGMA max_page_count={limit}").fetchone()
            return int(row[0])

        result: int = await self._write(job)
        return result

    def _migrate(self, conn: Conn) -> None:
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                exists = conn.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'"
                ).fetchall()
                if not exists:
                    schema = resources.files(__package__).joinpath("sqlite_schema.sql").read_text()
                    conn.execute(schema)
                    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
                else:
                    row = conn.execute("SELECT version FROM schema_version").fetchone()
                    version = int(row[0]) if row else 0
                    if version > SCHEMA_VERSION:
                        raise SchemaError(
                            f"database schema version {version} is newer than this dormant "
                            f"({SCHEMA_VERSION}); upgrade dormant to open {self.path!r}"
                        )
                    for target, sql in MIGRATIONS:
                        if target > version:
                            conn.execute(sql)
                            conn.execute("UPDATE schema_version SET version = ?", (target,))
                            version = target
                    if version != SCHEMA_VERSION:
                        raise SchemaError(
                            f"database schema version {version} of {self.path!r} has no migration "
                            f"to version {SCHEMA_VERSION}"
                        )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except apsw.Error as exc:
            raise translate(exc) from exc

    async def close(self) -> None:
        """Let queued writes finish, stop the writer, close connections."""
        if self._writer_queue is None:
            return
        self._closing = True
        await self._writer_queue.close()
        self._writer_queue = None
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for conn in (self._reader, self._writer):
            if conn is not None:
                conn.close()
        self._reader = self._writer = None
        self._batches.clear()
        self._loaded.clear()

    # -- the writer ------------------------------------------------------------------

    async def _write(self, job: Job, size: int = 256) -> Any:
        if self._writer_queue is None or self._closing:
            raise StoreError("the store is not open")
        return await self._writer_queue.submit(job, size)

    @property
    def commits(self) -> int:
        """Transactions committed by the writer (for benchmarks)."""
        return self._writer_queue.commits if self._writer_queue else 0

    def _read(self) -> Conn:
        if self._reader is None:
            raise StoreError("the store is not open")
        return self._reader

    def _read_hot(self) -> Conn:
        """The connection for a slice's reads: the writer's, unless it runs on its own thread.

        A WAL reader drops its whole page cache whenever another connection has
        committed since its last read, i.e. after every group commit here; the
        writer's cache survives its own commits, so the pages of hot threads and
        inputs stay cached. With the writer on the event loop's thread (the default)
        no batch runs while a slice reads, and between batches the writer holds no
        transaction, so it reads committed state, as the reader would.
        """
        writer = self._writer
        if self._executor is None and writer is not None and not writer.in_transaction:
            return writer
        return self._read()

    # -- threads ---------------------------------------------------------------------

    async def create_thread(self, thread_id: str, agent: str) -> Thread:
        """Create a thread if missing; return the stored row."""
        now = self.clock()

        def job(conn: Conn) -> Thread:
            conn.execute(
                "INSERT INTO threads (id, agent, created_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (thread_id, agent, now, now),
            )
            return self._get_thread(conn, thread_id)

        result: Thread = await self._write(job)
        return result

    def _get_thread(self, conn: Conn, thread_id: str) -> Thread:
        row = conn.execute(f"SELECT {THREAD_COLS} FROM threads WHERE id = ?", (thread_id,)).fetchone()
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")
        return row_thread(row)

    async def get_thread(self, thread_id: str) -> Thread:
        """The thread's row; NotFound if missing."""
        try:
            return self._get_thread(self._read(), thread_id)
        except apsw.Error as exc:
            raise translate(exc) from exc

    async def retry_thread(self, thread_id: str) -> Thread:
        """Reactivate a failed thread."""
        now = self.clock()

        def job(conn: Conn) -> Thread:
            conn.execute(
                "UPDATE threads SET status = 'active', failures = 0, error = NULL, "
                "lease_expires = 0, updated_at = ? WHERE id = ?",
                (now, thread_id),
            )
            if conn.changes() == 0:
                raise NotFound(f"no thread {thread_id!r}")
            conn.execute(REFRESH_READY, (thread_id,))
            return self._get_thread(conn, thread_id)

        result: Thread = await self._write(job)
        return result

    # -- admission -------------------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Admit inputs durably (one transaction for the batch)."""
        inbox.validate(items, self.max_input_bytes)
        now = self.clock()

        def job(conn: Conn) -> list[Admission]:
            return [self._admit_one(conn, item, now) for item in items]

        size = sum(len(item.content) for item in items) + 256 * len(items)
        result: list[Admission] = await self._write(job, size)
        return result

    def _admit_one(self, conn: Conn, item: NewInput, now: float) -> Admission:
        if item.agent:
            conn.execute(
                "INSERT INTO threads (id, agent, created_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (id) DO NOTHING",
                (item.thread_id, item.agent, now, now),
            )
        key = inbox.sort_key(item, now)
        try:
            conn.execute(
                INSERT_INPUT,
                (
                    item.thread_id,
                    item.dedup_key,
                    item.kind,
                    int(item.priority),
                    item.not_before,
                    now,
                    key,
                    item.content,
                    item.call_id,
                    item.tool_name,
                    int(item.is_error),
                    item.source,
                ),
            )
        except apsw.ConstraintError as exc:
            if "FOREIGN KEY" in str(exc):
                raise NotFound(f"no thread {item.thread_id!r} (pass an agent to create it)") from None
            raise
        input_id = conn.last_insert_rowid()
        # the dedup key decides; a duplicate (rare) takes its just-inserted row back out
        conn.execute(
            "INSERT INTO input_keys (thread_id, dedup_key, input_id) VALUES (?, ?, ?) "
            "ON CONFLICT (thread_id, dedup_key) DO NOTHING",
            (item.thread_id, item.dedup_key, input_id),
        )
        if conn.changes() == 0:
            conn.execute("DELETE FROM inputs WHERE id = ?", (input_id,))
            known = conn.execute(
                "SELECT input_id FROM input_keys WHERE thread_id = ? AND dedup_key = ?",
                (item.thread_id, item.dedup_key),
            ).fetchone()
            return Admission(
                input_id=known[0], thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=True
            )
        conn.execute(MARK_READY, (key, item.not_before, item.thread_id, item.kind))
        return Admission(
            input_id=input_id, thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=False
        )

    # -- scheduling ------------------------------------------------------------------

    async def claim_threads(self, worker: str, limit: int, lease_s: float) -> list[Claim]:
        """Lease up to ``limit`` ready threads."""
        if limit <= 0:
            return []

        def job(conn: Conn) -> list[Claim]:
            now = self.clock()
            # one token per claim batch: a lease is identified by (thread, token)
            token = secrets.token_hex(8)
            expires = now + lease_s
            rows = conn.execute(
                CLAIM_THREADS,
                {"now": now, "limit": limit, "token": token, "worker": worker, "expires": expires},
            ).fetchall()
            return [Claim(thread_id=r[0], token=token, expires_at=expires, agent=r[1]) for r in rows]

        result: list[Claim] = await self._write(job)
        if len(result) > 1:
            self._batches[result[0].token] = ([c.thread_id for c in result], False)
            while len(self._batches) > CLAIM_BATCHES_KEPT:
                self._forget_batch(next(iter(self._batches)))
        return result

    def _forget_batch(self, token: str) -> None:
        ids, _ = self._batches.pop(token, ((), True))
        for thread_id in ids:
            self._loaded.pop((token, thread_id), None)

    def _slice_rows(self, conn: Conn, claim: Claim, limits: ViewLimits) -> list[Any]:
        """The LOAD_SLICE rows of ``claim``, loaded with the rest of its claim batch.

        The first slice of a claim batch to load loads every thread of the batch in
        one statement; the others find their rows parked here. Loading early is safe:
        while the lease is held only this slice changes the thread row or consumes its
        inputs, so the rows stay true; an input admitted in between is left for the
        thread's next slice, as one admitted just after the load would be.
        """
        token = claim.token
        parked = self._loaded.pop((token, claim.thread_id), None)
        batch = self._batches.get(token)
        if parked is None and batch is not None and not batch[1]:
            ids = batch[0]
            self._batches[token] = (ids, True)
            parked_bytes = 0
            for row in conn.execute(LOAD_SLICES, (self.clock(), encode(ids).decode(), limits.max_inputs)):
                parked_bytes += ROW_OVERHEAD + len(row[THREAD_WIDTH + 4] or "")
                if parked_bytes > PARKED_BYTES:
                    # the rest of the batch (and this thread, whose rows may be partial)
                    # loads slice by slice
                    self._loaded.pop((token, row[0]), None)
                    break
                entry = self._loaded.get((token, row[0]))
                if entry is None:
                    self._loaded[(token, row[0])] = (limits.max_inputs, [row])
                else:
                    entry[1].append(row)
            parked = self._loaded.pop((token, claim.thread_id), None)
        if parked is not None and parked[0] == limits.max_inputs:
            return parked[1]
        rows: list[Any] = conn.execute(
            LOAD_SLICE, (self.clock(), claim.thread_id, limits.max_inputs)
        ).fetchall()
        return rows

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """Thread row, bounded view and ready inputs of a claimed thread."""
        conn = self._read_hot()
        try:
            # the thread row and its ready inputs (one row per input, or one row with
            # NULL input columns)
            rows = self._slice_rows(conn, claim, limits)
            if not rows:
                raise NotFound(f"no thread {claim.thread_id!r}")
            thread = row_thread(rows[0])
            inputs: list[Input] = []
            size = 0
            for row in rows:
                if row[THREAD_WIDTH] is None:
                    break
                size += len(row[THREAD_WIDTH + 4])
                if inputs and size > limits.max_input_bytes:
                    break
                inputs.append(row_input(row[THREAD_WIDTH:]))

            cached = self.views.get(thread, limits)
            if cached is None:
                summary = self._summary_for(conn, thread)
                view, inherited = build_view(
                    thread, limits, self._fetcher(conn), self._parent_of(conn), summary
                )
                self.views.put(thread, limits, view, summary, inherited)
            else:
                view, summary, inherited = cached
        except apsw.Error as exc:
            raise translate(exc) from exc
        return SliceLoad(thread=thread, view=view, inputs=tuple(inputs), summary=summary, inherited=inherited)

    def _fetcher(self, conn: Conn) -> Callable[[str, int, int, int], list[Message]]:
        def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
            messages = [
                row_message(r) for r in conn.execute(NEWEST_MESSAGES, (thread_id, max_seq, min_seq, limit))
            ]
            self.view_reads += 1
            self.view_read_bytes += sum(message_bytes(m) for m in messages)
            self.view_read_tokens += sum(m.tokens for m in messages)  # as stored (0: uncounted)
            return messages

        return fetch

    @staticmethod
    def _parent_of(conn: Conn) -> Callable[[str], tuple[str, int] | None]:
        def parent_of(thread_id: str) -> tuple[str, int] | None:
            row = conn.execute(
                "SELECT parent_id, parent_seq FROM threads WHERE id = ?", (thread_id,)
            ).fetchone()
            return (row[0], row[1]) if row and row[0] else None

        return parent_of

    def _summary_for(self, conn: Conn, thread: Thread) -> Summary | None:
        """The thread's latest summary, else the one its nearest ancestor had at the spawn."""
        if thread.summary_seq:
            row = conn.execute(SUMMARY_AT, (thread.id, thread.summary_seq)).fetchone()
            return row_summary(row) if row else None
        link = (thread.parent_id, thread.parent_seq) if thread.parent_id else None
        while link is not None:
            row = conn.execute(SUMMARY_INHERITED, link).fetchone()
            if row is not None:
                return row_summary(row)
            link = self._parent_of(conn)(link[0])
        return None

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a slice plan atomically; LeaseLost if the lease is gone."""
        now = self.clock()
        first_seq = plan.messages[0].seq if plan.messages else None
        if any(m.seq != plan.messages[0].seq + n for n, m in enumerate(plan.messages)):
            raise StoreError(f"the messages of a plan of {plan.thread_id!r} are not numbered in order")
        summary = plan.summary
        finish = {
            "tokens": sum(m.tokens for m in plan.messages),
            "upto": summary.upto_seq if summary else None,
            "covered": summary.covered_tokens if summary else None,
            "first_seq": first_seq,
            "last_seq": plan.messages[-1].seq if plan.messages else None,
            "awaiting": plan.awaiting,
            "now": now,
            "id": plan.thread_id,
            "token": plan.token,
        }

        def job(conn: Conn) -> None:
            if plan.consumed:
                marks = ",".join("?" * len(plan.consumed))
                conn.execute(
                    f"DELETE FROM inputs WHERE thread_id = ? AND id IN ({marks})",
                    (plan.thread_id, *plan.consumed),
                )
                if conn.changes() != len(plan.consumed):
                    self._check_lease(conn, plan.thread_id, plan.token)
                    raise StoreError(f"an input consumed by {plan.thread_id!r} is not pending")
            conn.execute(FINISH_SLICE, finish)
            if conn.changes() != 1:
                # raised after writes: the writer re-runs the batch with savepoints,
                # so this job's changes are rolled back and nothing else's
                self._check_lease(conn, plan.thread_id, plan.token)
                raise StoreError(
                    f"the plan of {plan.thread_id!r} does not fit its stored state (its messages do not "
                    "continue the history, or its summary does not move forward over stored messages)"
                )
            if summary is not None:
                conn.execute(
                    INSERT_SUMMARY,
                    (
                        plan.thread_id,
                        summary.upto_seq,
                        summary.made_at_seq,
                        summary.content,
                        summary.tokens,
                        summary.covered_tokens,
                        summary.created_at or now,
                    ),
                )
            if plan.messages:
                conn.executemany(
                    INSERT_MESSAGE,
                    [
                        (
                            plan.thread_id,
                            m.seq,
                            m.role,
                            m.content,
                            encode(m.tool_calls).decode() if m.tool_calls else None,
                            m.tool_call_id,
                            m.name,
                            m.source,
                            m.input_id,
                            m.created_at or now,
                            m.tokens,
                        )
                        for m in plan.messages
                    ],
                )
            if plan.calls:
                conn.executemany(
                    INSERT_CALL,
                    [
                        (plan.thread_id, c.call_id, c.tool, c.arguments, int(c.idempotent), now, now)
                        for c in plan.calls
                    ],
                )
            for child in plan.threads:
                conn.execute(
                    "INSERT INTO threads (id, agent, parent_id, parent_seq, created_at, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (child.id, child.agent, child.parent_id, child.parent_seq, now, now),
                )
            for item in plan.admissions:
                self._admit_one(conn, item, now)

        inbox.validate(plan.admissions, self.max_input_bytes)
        size = sum(len(m.content) for m in plan.messages) + 512
        if summary is not None:
            size += len(summary.content)
        try:
            await self._write(job, size)
        except BaseException:
            self.views.discard(plan.thread_id)
            raise
        self.views.advance(plan.thread_id, plan.messages, summarized=summary is not None)

    @staticmethod
    def _check_lease(conn: Conn, thread_id: str, token: str) -> None:
        row = conn.execute("SELECT lease_token FROM threads WHERE id = ?", (thread_id,)).fetchone()
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")
        if row[0] != token:
            raise LeaseLost(f"lease on thread {thread_id!r} was lost before commit")

    async def release(
        self, claim: Claim, *, retry_at: float = 0.0, error: str | None = None, fail: bool = False
    ) -> None:
        """Give a lease back without committing."""
        now = self.clock()

        def job(conn: Conn) -> None:
            conn.execute(
                "UPDATE threads SET lease_token = NULL, lease_owner = NULL, lease_expires = ?, "
                "failures = failures + ?, error = coalesce(?, error), "
                "status = CASE WHEN ? THEN 'failed' ELSE status END, updated_at = ? "
                "WHERE id = ? AND lease_token = ?",
                (retry_at, 1 if error else 0, error, int(fail), now, claim.thread_id, claim.token),
            )
            if fail:
                conn.execute(REFRESH_READY, (claim.thread_id,))

        await self._write(job)

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend held leases; return the renewed claims."""
        if not claims:
            return []

        def job(conn: Conn) -> list[Claim]:
            expires = self.clock() + lease_s
            kept = []
            for claim in claims:
                conn.execute(
                    "UPDATE threads SET lease_expires = ? WHERE id = ? AND lease_token = ?",
                    (expires, claim.thread_id, claim.token),
                )
                if conn.changes():
                    kept.append(msgspec.structs.replace(claim, expires_at=expires))
            return kept

        result: list[Claim] = await self._write(job)
        return result

    # -- reads -----------------------------------------------------------------------

    async def history(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
    ) -> Page[Message]:
        """One page of a thread's messages; the cursor is the last seq seen."""
        conn = self._read()
        limit = clamp_limit(limit)
        try:
            self._get_thread(conn, thread_id)
            if newest_first:
                after = seq_cursor(cursor, default=2**62)
                sql = (
                    f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ? AND seq < ? "
                    "ORDER BY seq DESC LIMIT ?"
                )
            else:
                after = seq_cursor(cursor, default=0)
                sql = (
                    f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?"
                )
            rows = conn.execute(sql, (thread_id, after, limit + 1)).fetchall()
        except apsw.Error as exc:
            raise translate(exc) from exc
        items = tuple(row_message(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].seq) if more and items else None)

    async def list_threads(self, *, cursor: str | None = None, limit: int = 50) -> Page[Thread]:
        """One page of threads by id."""
        limit = clamp_limit(limit)
        try:
            rows = (
                self._read()
                .execute(
                    f"SELECT {THREAD_COLS} FROM threads WHERE id > ? ORDER BY id LIMIT ?",
                    (cursor or "", limit + 1),
                )
                .fetchall()
            )
        except apsw.Error as exc:
            raise translate(exc) from exc
        items = tuple(row_thread(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=items[-1].id if more and items else None)

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries by id."""
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=0)
        try:
            rows = (
                self._read()
                .execute(
                    f"SELECT {OUTBOX_COLS} FROM outbox "
                    "WHERE id > ? AND (? IS NULL OR status = ?) ORDER BY id LIMIT ?",
                    (after, status, status, limit + 1),
                )
                .fetchall()
            )
        except apsw.Error as exc:
            raise translate(exc) from exc
        items = tuple(row_entry(r) for r in rows[:limit])
        more = len(rows) > limit
        return Page(items=items, next_cursor=str(items[-1].id) if more and items else None)

    async def has_work(self) -> bool:
        """Ready input, a leased thread, or an open outbox entry."""
        now = self.clock()
        try:
            row = (
                self._read()
                .execute(
                    "SELECT EXISTS (SELECT 1 FROM threads WHERE ready_key IS NOT NULL AND ready_at <= ?)"
                    " OR EXISTS (SELECT 1 FROM threads WHERE lease_token IS NOT NULL)"
                    " OR EXISTS (SELECT 1 FROM outbox WHERE status IN ('pending', 'running'))",
                    (now,),
                )
                .fetchone()
            )
        except apsw.Error as exc:
            raise translate(exc) from exc
        return bool(row[0])

    async def status(self) -> StoreStatus:
        """Counts and sizes for ``dormant status``."""
        conn = self._read()
        now = self.clock()
        try:
            by_status = dict(conn.execute("SELECT status, COUNT(*) FROM threads GROUP BY status").fetchall())
            ready = conn.execute(
                "SELECT COUNT(*) FROM threads WHERE ready_key IS NOT NULL AND ready_at <= ?", (now,)
            ).fetchone()[0]
            leased = conn.execute("SELECT COUNT(*) FROM threads WHERE lease_token IS NOT NULL").fetchone()[0]
            backlog = {
                f"P{p}": n
                for p, n in conn.execute("SELECT priority, COUNT(*) FROM inputs GROUP BY priority").fetchall()
            }
            outbox = dict(conn.execute("SELECT status, COUNT(*) FROM outbox GROUP BY status").fetchall())
            messages = conn.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
            version = conn.execute("SELECT version FROM schema_version").fetchone()[0]
        except apsw.Error as exc:
            raise translate(exc) from exc
        return StoreStatus(
            threads_by_status=by_status,
            threads_ready=ready,
            threads_leased=leased,
            backlog_by_priority=backlog,
            outbox_by_status=outbox,
            dead_letters=outbox.get("dead", 0),
            messages=messages,
            db_bytes=file_size(self.path),
            wal_bytes=file_size(self.path + "-wal"),
            schema_version=version,
        )
