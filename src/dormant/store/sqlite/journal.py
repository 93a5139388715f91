"""The state journal's row operations on SQLite (see :class:`~dormant.store.backend.Backend`);
slices journal their changes in :func:`~dormant.store.sqlite.jobs.apply_plan`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...errors import NotFound
from ...records import JournalEntry
from ..rows import row_journal
from . import journal_sql, sql
from .writer import Conn

#: the backend's ``_write``: run a job on the group-committing writer (its size estimate optional)
Write = Callable[..., Awaitable[Any]]
Query = Callable[[str, Sequence[Any]], list[Any]]


class SQLiteJournal:
    """Journal reads (the API connection) and checkpoint writes (the group-committing writer)."""

    def __init__(self, write: Write, query: Query, clock: Callable[[], float]) -> None:
        self.write = write
        self.query = query
        self.clock = clock

    async def journal_rows(self, thread_id: str, after: int, limit: int) -> list[JournalEntry] | None:
        """Journal entries of a thread after seq ``after``; None if the thread is missing."""
        if not self.query(sql.THREAD_EXISTS, (thread_id,)):
            return None
        return [row_journal(r) for r in self.query(journal_sql.JOURNAL_PAGE, (thread_id, after, limit))]

    async def newest_checkpoint(self, thread_id: str, kind: str) -> JournalEntry | None:
        """The newest recoverable checkpoint of ``kind`` of a thread."""
        rows = self.query(journal_sql.NEWEST_CHECKPOINT, (thread_id, kind))
        return row_journal(rows[0]) if rows else None

    async def checkpoints_after(self, thread_id: str, after: int, limit: int) -> list[JournalEntry]:
        """Recoverable checkpoint headers of a thread after seq ``after``."""
        return [row_journal(r) for r in self.query(journal_sql.CHECKPOINTS_AFTER, (thread_id, after, limit))]

    async def thread_runs(self, thread_id: str) -> int | None:
        """Runs the thread ended; None if it is missing."""
        rows = self.query(journal_sql.THREAD_RUNS, (thread_id,))
        return int(rows[0][0]) if rows else None

    async def subject_threads(self, subject: str, tenant: str, exclude: str, limit: int) -> list[str]:
        """Ids of the tenant's active threads of ``subject`` but ``exclude``, newest first."""
        return [r[0] for r in self.query(journal_sql.SUBJECT_THREADS, (subject, tenant, exclude, limit))]

    async def begin_checkpoint(
        self, thread_id: str, kind: str, upto: int, parts: int, size: int, digest: str, msg_seq: int = 0
    ) -> JournalEntry:
        """Insert a checkpoint header (not recoverable)."""
        now = self.clock()

        def job(conn: Conn) -> JournalEntry:
            if conn.execute(sql.THREAD_EXISTS, (thread_id,)).fetchone() is None:
                raise NotFound(f"no thread {thread_id!r}")
            row = conn.execute(
                journal_sql.INSERT_CHECKPOINT, (thread_id, kind, upto, parts, size, digest, now, msg_seq)
            ).fetchone()
            return row_journal(row)

        result: JournalEntry = await self.write(job, 256)
        return result

    async def put_checkpoint_parts(self, thread_id: str, seq: int, first: int, parts: Sequence[str]) -> None:
        """Store parts ``first ..`` of checkpoint ``seq``, one transaction."""
        rows = [(thread_id, seq, first + n, data) for n, data in enumerate(parts)]

        def job(conn: Conn) -> None:
            conn.executemany(journal_sql.INSERT_PART, rows)

        await self.write(job, sum(map(len, parts)) + 64)

    async def checkpoint_parts(self, thread_id: str, seq: int, first: int, limit: int) -> list[str]:
        """Up to ``limit`` parts of checkpoint ``seq`` from index ``first``."""
        return [r[0] for r in self.query(journal_sql.PARTS_PAGE, (thread_id, seq, first, limit))]

    async def mark_recoverable(self, thread_id: str, seq: int) -> bool:
        """Mark checkpoint ``seq`` recoverable if all its parts are stored."""

        def job(conn: Conn) -> bool:
            conn.execute(journal_sql.MARK_RECOVERABLE, (thread_id, seq))
            return bool(conn.changes())

        result: bool = await self.write(job, 256)
        return result
