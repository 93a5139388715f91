"""The state journal's row operations on PostgreSQL (see
:class:`~dormant.store.backend.Backend`); slices journal their changes inside
``dormant_commit_slice``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ...errors import NotFound
from ...records import JournalEntry
from ..rows import row_journal
from . import sql
from .driver import Rows
from .reads import PgReads
from .writer import Job


class PgJournal:
    """Journal reads (read pool) and checkpoint writes (the group-committing writer)."""

    def __init__(
        self, reads: PgReads, write: Callable[[Job, int], Awaitable[Any]], clock: Callable[[], float]
    ) -> None:
        self.reads = reads
        self.write = write
        self.clock = clock

    async def journal_rows(self, thread_id: str, after: int, limit: int) -> list[JournalEntry] | None:
        """Journal entries after seq ``after``; None if the thread is missing."""
        if not await self.reads.rows(sql.THREAD_EXISTS, (thread_id,)):
            return None
        return [row_journal(r) for r in await self.reads.rows(sql.JOURNAL_PAGE, (thread_id, after, limit))]

    async def newest_checkpoint(self, thread_id: str, kind: str) -> JournalEntry | None:
        """The newest recoverable checkpoint of ``kind``."""
        rows = await self.reads.rows(sql.NEWEST_CHECKPOINT, (thread_id, kind))
        return row_journal(rows[0]) if rows else None

    async def checkpoints_after(self, thread_id: str, after: int, limit: int) -> list[JournalEntry]:
        """Recoverable checkpoint headers after seq ``after``."""
        return [
            row_journal(r) for r in await self.reads.rows(sql.CHECKPOINTS_AFTER, (thread_id, after, limit))
        ]

    async def thread_runs(self, thread_id: str) -> int | None:
        """Runs the thread ended; None if missing."""
        rows = await self.reads.rows(sql.THREAD_RUNS, (thread_id,))
        return int(rows[0][0]) if rows else None

    async def subject_threads(self, subject: str, tenant: str, exclude: str, limit: int) -> list[str]:
        """Ids of the tenant's active threads of ``subject`` but ``exclude``, newest first."""
        return [r[0] for r in await self.reads.rows(sql.SUBJECT_THREADS, (subject, tenant, exclude, limit))]

    async def begin_checkpoint(
        self, thread_id: str, kind: str, upto: int, parts: int, size: int, digest: str, msg_seq: int = 0
    ) -> JournalEntry:
        """Insert a checkpoint header (not recoverable)."""
        params = {
            "id": thread_id,
            "kind": kind,
            "upto": upto,
            "parts": parts,
            "size": size,
            "digest": digest,
            "now": self.clock(),
            "msg_seq": msg_seq,
        }

        def decode(rows: Rows, count: int) -> JournalEntry:
            if not rows:
                raise NotFound(f"no thread {thread_id!r}")
            return row_journal(rows[0])

        result: JournalEntry = await self.write(
            Job(sql.BEGIN_CHECKPOINT, params, decode, threads=(thread_id,)), 512
        )
        return result

    async def put_checkpoint_parts(self, thread_id: str, seq: int, first: int, parts: Sequence[str]) -> None:
        """Store body pieces ``first ..`` of checkpoint ``seq``."""
        job = Job(sql.INSERT_PARTS, (thread_id, seq, first, list(parts)), lambda rows, count: None)
        await self.write(job, sum(map(len, parts)) + 256)

    async def checkpoint_parts(self, thread_id: str, seq: int, first: int, limit: int) -> list[str]:
        """Body pieces of checkpoint ``seq`` from index ``first``."""
        return [r[0] for r in await self.reads.rows(sql.PARTS_PAGE, (thread_id, seq, first, limit))]

    async def mark_recoverable(self, thread_id: str, seq: int) -> bool:
        """Mark checkpoint ``seq`` recoverable if all its parts are stored."""
        job = Job(sql.MARK_RECOVERABLE, {"id": thread_id, "seq": seq}, lambda rows, count: count == 1)
        result: bool = await self.write(job, 256)
        return result
