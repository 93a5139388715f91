"""The SQLite backend: one file, WAL, one group-committing writer, separate readers.

Why apsw rather than the stdlib ``sqlite3``: it bundles a current SQLite (3.54;
the system library here is 3.40), it can load extensions (sqlite-vec for the
memory index) and it gives explicit transaction control with no hidden BEGINs.

Writes never run on the caller's task: each write is a *job* queued to the
writer, which runs many jobs in one ``BEGIN IMMEDIATE`` transaction, each inside
its own savepoint (so one job's error rolls back only that job), commits once,
and then answers every caller. A caller is answered only after the commit that
holds its job, so nothing is acknowledged before it is durable. The queue is
bounded in jobs and bytes; past the bound admissions fail with ``Overloaded``.
Reads run on the event loop's thread with their own connection (WAL readers do
not block the writer).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Any, TypeVar

import apsw
import msgspec

from .. import inbox
from ..context import ViewCache, build_view
from ..errors import (
    DormantError,
    LeaseLost,
    NotFound,
    Overloaded,
    SchemaError,
    StoreError,
    StoreFull,
    StoreLocked,
    UsageError,
)
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
    Priority,
    SliceLoad,
    StoreStatus,
    Thread,
    ToolCall,
    ViewLimits,
)
from .base import clamp_limit, seq_cursor

T = TypeVar("T")
# apsw.Connection; typed Any because rows are untyped tuples until converted below
Conn = Any
Job = Callable[[Conn], Any]

SCHEMA_VERSION = 1
#: Ordered migrations: (version reached, SQL). A new database runs the schema file.
MIGRATIONS: list[tuple[int, str]] = []

_tool_calls_codec = msgspec.json.Decoder(tuple[ToolCall, ...])
_encode = msgspec.json.encode

THREAD_COLS = (
    "id, agent, parent_id, parent_seq, status, last_seq, awaiting, failures, error, created_at, updated_at"
)
INPUT_COLS = (
    "id, thread_id, kind, dedup_key, content, priority, not_before, admitted_at, "
    "call_id, tool_name, is_error, source"
)
MESSAGE_COLS = "seq, role, content, tool_calls, tool_call_id, name, source, input_id, created_at"
OUTBOX_COLS = (
    "id, thread_id, agent, call_id, tool, arguments, status, attempts, idempotent, "
    "lease_token, last_error, created_at"
)

# Recompute a thread's readiness from its consumable pending inputs.
REFRESH_READY = """
UPDATE threads SET
  ready_key = CASE WHEN status = 'active' THEN (
      SELECT MIN(i.sort_key) FROM inputs i
      WHERE i.thread_id = threads.id AND (threads.awaiting = 0 OR i.kind = 'tool_result')) END,
  ready_at = CASE WHEN status = 'active' THEN (
      SELECT MIN(i.not_before) FROM inputs i
      WHERE i.thread_id = threads.id AND (threads.awaiting = 0 OR i.kind = 'tool_result')) END
WHERE id = ?
"""
CLAIM_THREADS = """
UPDATE threads SET lease_token = :token, lease_owner = :worker, lease_expires = :expires
WHERE id IN (
    SELECT id FROM threads
    WHERE ready_key IS NOT NULL AND ready_at <= :now AND lease_expires <= :now
    ORDER BY ready_key LIMIT :limit)
RETURNING id
"""
CLAIM_OUTBOX = f"""
UPDATE outbox SET status = 'running', attempts = attempts + 1, lease_token = :token,
                  lease_owner = :worker, lease_expires = :expires
WHERE id IN (
    SELECT id FROM outbox WHERE status = 'pending' AND available_at <= :now
    ORDER BY available_at LIMIT :limit)
RETURNING {OUTBOX_COLS}
"""
INSERT_INPUT = """
INSERT INTO inputs (thread_id, dedup_key, kind, priority, not_before, admitted_at, sort_key,
                    content, call_id, tool_name, is_error, source)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
RETURNING id
"""
INSERT_MESSAGE = """
INSERT INTO messages (thread_id, seq, role, content, tool_calls, tool_call_id, name, source,
                      input_id, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
"""
INSERT_CALL = """
INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at,
                    created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
"""
# Release a committed slice's lease and recompute readiness with the new awaiting count
# (:awaiting, not the column: SET expressions see the row's old values).
FINISH_SLICE = """
UPDATE threads SET
  last_seq = coalesce(:last_seq, last_seq), awaiting = :awaiting, failures = 0, error = NULL,
  lease_token = NULL, lease_owner = NULL, lease_expires = 0, updated_at = :now,
  ready_key = (SELECT MIN(i.sort_key) FROM inputs i
               WHERE i.thread_id = :id AND (:awaiting = 0 OR i.kind = 'tool_result')),
  ready_at = (SELECT MIN(i.not_before) FROM inputs i
              WHERE i.thread_id = :id AND (:awaiting = 0 OR i.kind = 'tool_result'))
WHERE id = :id AND lease_token = :token AND (:first_seq IS NULL OR last_seq = :first_seq - 1)
RETURNING agent
"""
MARK_READY = """
UPDATE threads SET ready_key = min(coalesce(ready_key, ?1), ?1),
                   ready_at = min(coalesce(ready_at, ?2), ?2)
WHERE id = ?3 AND status = 'active' AND (awaiting = 0 OR ?4 = 'tool_result')
"""


def translate(exc: BaseException) -> BaseException:
    """Turn an apsw error into the dormant error a caller should see."""
    if isinstance(exc, DormantError) or not isinstance(exc, apsw.Error):
        return exc
    if isinstance(exc, apsw.FullError):
        new: StoreError = StoreFull(f"the database or its disk is full: {exc}")
    elif isinstance(exc, apsw.BusyError | apsw.LockedError):
        new = StoreLocked(f"the database stayed locked past the busy timeout: {exc}")
    elif isinstance(exc, apsw.CorruptError | apsw.NotADBError):
        new = SchemaError(f"the database file is damaged ({exc}); run `dormant doctor`")
    else:
        new = StoreError(f"SQLite error: {exc}")
    new.__cause__ = exc
    return new


def _path_from_url(url: str) -> str:
    """The file of a SQLite URL: ``sqlite:///rel.db`` is relative, ``sqlite:////abs.db`` absolute."""
    if not url.startswith("sqlite:///"):
        raise UsageError(f"not a SQLite URL: {url!r} (expected sqlite:///path/to/file.db)")
    path = url[len("sqlite:///") :]
    if not path or path.endswith("/"):
        raise UsageError(f"SQLite URL has no file path: {url!r}")
    return path


def _thread(row: Sequence[Any]) -> Thread:
    return Thread(
        id=row[0],
        agent=row[1],
        parent_id=row[2],
        parent_seq=row[3],
        status=row[4],
        last_seq=row[5],
        awaiting=row[6],
        failures=row[7],
        error=row[8],
        created_at=row[9],
        updated_at=row[10],
    )


def _input(row: Sequence[Any]) -> Input:
    return Input(
        id=row[0],
        thread_id=row[1],
        kind=row[2],
        dedup_key=row[3],
        content=row[4],
        priority=Priority(row[5]),
        not_before=row[6],
        admitted_at=row[7],
        call_id=row[8],
        tool_name=row[9],
        is_error=bool(row[10]),
        source=row[11],
    )


def _message(row: Sequence[Any]) -> Message:
    return Message(
        seq=row[0],
        role=row[1],
        content=row[2],
        tool_calls=_tool_calls_codec.decode(row[3]) if row[3] else (),
        tool_call_id=row[4],
        name=row[5],
        source=row[6],
        input_id=row[7],
        created_at=row[8],
    )


def _entry(row: Sequence[Any]) -> OutboxEntry:
    return OutboxEntry(
        id=row[0],
        thread_id=row[1],
        agent=row[2],
        call_id=row[3],
        tool=row[4],
        arguments=row[5],
        status=row[6],
        attempts=row[7],
        idempotent=bool(row[8]),
        token=row[9],
        last_error=row[10],
        created_at=row[11],
    )


class SQLiteStore:
    """The embedded default store. See the module docstring for the write path."""

    def __init__(
        self,
        url: str,
        *,
        synchronous: str = "NORMAL",
        busy_timeout_ms: int = 5000,
        page_size: int = 16384,
        view_cache_bytes: int = 32 * 1024 * 1024,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
        batch_jobs: int = 512,
        batch_bytes: int = 8 * 1024 * 1024,
        queue_jobs: int = 20_000,
        queue_bytes: int = 64 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL", "EXTRA"):
            raise UsageError(f"synchronous must be NORMAL, FULL or EXTRA, not {synchronous!r}")
        self.url = url
        self.path = _path_from_url(url)
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self.page_size = page_size
        self.views = ViewCache(view_cache_bytes)
        self.max_input_bytes = max_input_bytes
        self.batch_jobs = batch_jobs
        self.batch_bytes = batch_bytes
        self.queue_jobs = queue_jobs
        self.queue_bytes = queue_bytes
        self.clock = clock
        self._reader: Conn | None = None
        self._writer: Conn | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._queue: deque[tuple[Job, asyncio.Future[Any], int]] = deque()
        self._queued_bytes = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self.commits = 0  # transactions committed by the writer (for benchmarks)

    # -- lifecycle -------------------------------------------------------------------

    def _connect(self) -> apsw.Connection:
        try:
            conn = apsw.Connection(self.path)
            conn.setbusytimeout(self.busy_timeout_ms)
            # only takes effect on a new file, and only before WAL mode is set
            conn.execute(f"PRAGMA page_size={self.page_size}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute("PRAGMA foreign_keys=ON")
            return conn
        except apsw.Error as exc:
            raise translate(exc) from exc

    async def open(self) -> None:
        """Open connections, create or migrate the schema, start the writer."""
        if self._task is not None:
            return
        directory = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(directory):
            raise UsageError(f"directory {directory!r} of the database does not exist")
        self._writer = self._connect()
        try:
            self._migrate(self._writer)
        except BaseException:
            self._writer.close()
            self._writer = None
            raise
        self._reader = self._connect()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dormant-writer")
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._write_loop(), name="dormant-sqlite-writer")

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
        if self._task is None:
            return
        self._closing = True
        assert self._wake is not None
        self._wake.set()
        await self._task
        self._task = None
        assert self._executor is not None
        self._executor.shutdown(wait=True)
        for conn in (self._reader, self._writer):
            if conn is not None:
                conn.close()
        self._reader = self._writer = None

    # -- the writer ------------------------------------------------------------------

    async def _write(self, job: Job, size: int = 256) -> Any:
        if self._task is None or self._closing:
            raise StoreError("the store is not open")
        if len(self._queue) >= self.queue_jobs or self._queued_bytes + size > self.queue_bytes:
            raise Overloaded("the store's write queue is full", retry_after=0.5)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((job, future, size))
        self._queued_bytes += size
        assert self._wake is not None
        self._wake.set()
        return await future

    async def _write_loop(self) -> None:
        assert self._wake is not None
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
            results = (
                self._apply([b[0] for b in batch])
                if os.environ.get("INLINE")
                else await loop.run_in_executor(self._executor, self._apply, [b[0] for b in batch])
            )
            for (_, future, _), (ok, value) in zip(batch, results, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)

    def _apply(self, jobs: list[Job]) -> list[tuple[bool, Any]]:
        """Run ``jobs`` in one transaction (writer thread).

        Fast path: all jobs back to back, one COMMIT. If any job raises, the whole
        transaction is rolled back and the batch re-run with one savepoint per job,
        so a failing job takes only its own changes with it.
        """
        conn = self._writer
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            err = translate(exc)
            return [(False, err)] * len(jobs)
        try:
            values = [job(conn) for job in jobs]
        except BaseException:  # re-run carefully below
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return self._apply_careful(jobs)
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            err = translate(exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return [(False, err)] * len(jobs)
        self.commits += 1
        return [(True, value) for value in values]

    def _apply_careful(self, jobs: list[Job]) -> list[tuple[bool, Any]]:
        """Run ``jobs`` in one transaction, one savepoint each."""
        conn = self._writer
        assert conn is not None
        try:
            conn.execute("BEGIN IMMEDIATE")
        except apsw.Error as exc:
            err = translate(exc)
            return [(False, err)] * len(jobs)
        results: list[tuple[bool, Any]] = []
        for job in jobs:
            try:
                conn.execute("SAVEPOINT job")
                value = job(conn)
                conn.execute("RELEASE job")
                results.append((True, value))
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK TO job")
                    conn.execute("RELEASE job")
                    results.append((False, translate(exc)))
                else:  # SQLite rolled the whole transaction back (e.g. disk full)
                    err = translate(exc)
                    return [(False, err)] * len(jobs)
        try:
            conn.execute("COMMIT")
        except apsw.Error as exc:
            err = translate(exc)
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return [(False, err)] * len(jobs)
        self.commits += 1
        return results

    def _read(self) -> Conn:
        if self._reader is None:
            raise StoreError("the store is not open")
        return self._reader

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
        return _thread(row)

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
        known = conn.execute(
            "SELECT input_id FROM input_keys WHERE thread_id = ? AND dedup_key = ?",
            (item.thread_id, item.dedup_key),
        ).fetchone()
        if known is not None:
            return Admission(
                input_id=known[0], thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=True
            )
        key = inbox.sort_key(item, now)
        try:
            input_id = conn.execute(
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
            ).fetchone()[0]
        except apsw.ConstraintError as exc:
            if "FOREIGN KEY" in str(exc):
                raise NotFound(f"no thread {item.thread_id!r} (pass an agent to create it)") from None
            raise
        conn.execute(
            "INSERT INTO input_keys (thread_id, dedup_key, input_id) VALUES (?, ?, ?)",
            (item.thread_id, item.dedup_key, input_id),
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
            return [Claim(thread_id=r[0], token=token, expires_at=expires) for r in rows]

        result: list[Claim] = await self._write(job)
        return result

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """Thread row, bounded view and ready inputs of a claimed thread."""
        conn = self._read()
        try:
            thread = self._get_thread(conn, claim.thread_id)
            now = self.clock()
            rows = conn.execute(
                f"SELECT {INPUT_COLS} FROM inputs WHERE thread_id = ? "
                "AND not_before <= ? AND (? = 0 OR kind = 'tool_result') ORDER BY id LIMIT ?",
                (claim.thread_id, now, thread.awaiting, limits.max_inputs),
            ).fetchall()
            inputs: list[Input] = []
            size = 0
            for row in rows:
                size += len(row[4])
                if inputs and size > limits.max_input_bytes:
                    break
                inputs.append(_input(row))

            def fetch(thread_id: str, max_seq: int, limit: int) -> list[Message]:
                return [
                    _message(r)
                    for r in conn.execute(
                        f"SELECT {MESSAGE_COLS} FROM messages WHERE thread_id = ? AND seq <= ? "
                        "ORDER BY seq DESC LIMIT ?",
                        (thread_id, max_seq, limit),
                    )
                ]

            def parent_of(thread_id: str) -> tuple[str, int] | None:
                row = conn.execute(
                    "SELECT parent_id, parent_seq FROM threads WHERE id = ?", (thread_id,)
                ).fetchone()
                return (row[0], row[1]) if row and row[0] else None

            view = self.views.get(thread.id, thread.last_seq, limits)
            if view is None:
                view = build_view(thread, limits, fetch, parent_of)
                self.views.put(thread.id, thread.last_seq, limits, view)
        except apsw.Error as exc:
            raise translate(exc) from exc
        return SliceLoad(thread=thread, view=view, inputs=tuple(inputs))

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a slice plan atomically; LeaseLost if the lease is gone."""
        now = self.clock()
        first_seq = plan.messages[0].seq if plan.messages else None
        if any(m.seq != plan.messages[0].seq + n for n, m in enumerate(plan.messages)):
            raise StoreError(f"the messages of a plan of {plan.thread_id!r} are not numbered in order")
        finish = {
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
            row = conn.execute(FINISH_SLICE, finish).fetchone()
            if row is None:
                # raised after writes: the writer re-runs the batch with savepoints,
                # so this job's changes are rolled back and nothing else's
                self._check_lease(conn, plan.thread_id, plan.token)
                raise StoreError(f"the messages of {plan.thread_id!r} do not continue its history")
            agent = row[0]
            if plan.messages:
                conn.executemany(
                    INSERT_MESSAGE,
                    [
                        (
                            plan.thread_id,
                            m.seq,
                            m.role,
                            m.content,
                            _encode(m.tool_calls).decode() if m.tool_calls else None,
                            m.tool_call_id,
                            m.name,
                            m.source,
                            m.input_id,
                            m.created_at or now,
                        )
                        for m in plan.messages
                    ],
                )
            if plan.calls:
                conn.executemany(
                    INSERT_CALL,
                    [
                        (plan.thread_id, agent, c.call_id, c.tool, c.arguments, int(c.idempotent), now, now)
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
        try:
            await self._write(job, size)
        except BaseException:
            self.views.discard(plan.thread_id)
            raise
        self.views.advance(plan.thread_id, plan.messages)

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
                    kept.append(Claim(thread_id=claim.thread_id, token=claim.token, expires_at=expires))
            return kept

        result: list[Claim] = await self._write(job)
        return result

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(self, worker: str, limit: int, lease_s: float) -> list[OutboxEntry]:
        """Reconcile expired running entries, then lease due pending ones."""

        def job(conn: Conn) -> list[OutboxEntry]:
            now = self.clock()
            expired = conn.execute(
                "SELECT id, thread_id, call_id, tool, idempotent FROM outbox "
                "WHERE status = 'running' AND lease_expires <= ? ORDER BY lease_expires LIMIT 256",
                (now,),
            ).fetchall()
            for entry_id, thread_id, call_id, tool, idempotent in expired:
                if idempotent:
                    conn.execute(
                        "UPDATE outbox SET status = 'pending', available_at = ?, lease_token = NULL, "
                        "lease_owner = NULL, lease_expires = 0 WHERE id = ?",
                        (now, entry_id),
                    )
                else:
                    conn.execute(
                        "UPDATE outbox SET status = 'unknown', finished_at = ?, lease_token = NULL, "
                        "lease_owner = NULL, last_error = 'lease expired while running' WHERE id = ?",
                        (now, entry_id),
                    )
                    self._admit_result(conn, thread_id, call_id, tool, inbox.UNKNOWN_OUTCOME, True, now)
            if limit <= 0:
                return []
            params = {
                "now": now,
                "limit": limit,
                "token": secrets.token_hex(8),
                "worker": worker,
                "expires": now + lease_s,
            }
            return sorted((_entry(r) for r in conn.execute(CLAIM_OUTBOX, params)), key=lambda e: e.id)

        result: list[OutboxEntry] = await self._write(job)
        return result

    def _admit_result(
        self,
        conn: Conn,
        thread_id: str,
        call_id: str,
        tool: str,
        content: str,
        is_error: bool,
        now: float,
    ) -> None:
        item = NewInput(
            thread_id=thread_id,
            kind="tool_result",
            dedup_key=call_id,
            content=content,
            call_id=call_id,
            tool_name=tool,
            is_error=is_error,
        )
        self._admit_one(conn, item, now)

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False
    ) -> Admission:
        """Answer an open call from outside; see :meth:`Store.complete_call`."""
        item = NewInput(
            thread_id=thread_id, kind="tool_result", dedup_key=call_id, content=content, call_id=call_id
        )
        inbox.validate([item], self.max_input_bytes)
        now = self.clock()

        def job(conn: Conn) -> Admission:
            known = conn.execute(
                "SELECT input_id FROM input_keys WHERE thread_id = ? AND dedup_key = ?", (thread_id, call_id)
            ).fetchone()
            if known is not None:
                return Admission(input_id=known[0], thread_id=thread_id, dedup_key=call_id, duplicate=True)
            row = conn.execute(
                "DELETE FROM outbox WHERE thread_id = ? AND call_id = ? AND status IN ('pending', 'running') "
                "RETURNING tool",
                (thread_id, call_id),
            ).fetchone()
            if row is None:
                raise NotFound(f"thread {thread_id!r} has no open call {call_id!r}")
            answer = msgspec.structs.replace(item, tool_name=row[0], is_error=is_error)
            return self._admit_one(conn, answer, now)

        result: Admission = await self._write(job, len(content) + 256)
        return result

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the tool result in the same transaction."""
        for outcome in outcomes:
            if len(outcome.content.encode()) > self.max_input_bytes:
                raise UsageError("tool result exceeds the input size limit; truncate it first")
        now = self.clock()

        def job(conn: Conn) -> list[bool]:
            held = []
            for o in outcomes:
                if o.kind == "retry":
                    conn.execute(
                        "UPDATE outbox SET status = 'pending', available_at = ?, last_error = ?, "
                        "lease_token = NULL, lease_owner = NULL, lease_expires = 0 "
                        "WHERE id = ? AND status = 'running' AND lease_token = ?",
                        (o.retry_at, o.error, o.entry_id, o.token),
                    )
                    held.append(conn.changes() == 1)
                    continue
                if o.kind == "done":
                    row = conn.execute(
                        "DELETE FROM outbox WHERE id = ? AND status = 'running' AND lease_token = ? "
                        "RETURNING thread_id, call_id, tool",
                        (o.entry_id, o.token),
                    ).fetchone()
                else:
                    row = conn.execute(
                        "UPDATE outbox SET status = 'dead', finished_at = ?, last_error = ?, "
                        "lease_token = NULL, lease_owner = NULL, lease_expires = 0 "
                        "WHERE id = ? AND status = 'running' AND lease_token = ? "
                        "RETURNING thread_id, call_id, tool",
                        (now, o.error, o.entry_id, o.token),
                    ).fetchone()
                held.append(row is not None)
                if row is not None:
                    self._admit_result(conn, row[0], row[1], row[2], o.content, o.is_error, now)
            return held

        size = sum(len(o.content) for o in outcomes) + 256
        result: list[bool] = await self._write(job, size)
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
        items = tuple(_message(r) for r in rows[:limit])
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
        items = tuple(_thread(r) for r in rows[:limit])
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
        items = tuple(_entry(r) for r in rows[:limit])
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
            db_bytes=_size(self.path),
            wal_bytes=_size(self.path + "-wal"),
            schema_version=version,
        )


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0
