"""Retention's row operations on SQLite (see :class:`~dormant.store.backend.Backend`),
the ``retention`` part of :class:`~dormant.store.sqlite.backend.SQLiteBackend`: each write is one job
of the group-committing writer (one transaction), each read one query."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from ...errors import NotFound, UsageError
from ...records import JournalEntry, RetentionMark, Thread, TierSizes
from ...tools.blobs import BLOB_LINE, REF_CHARS
from ..rows import row_journal, row_tier_sizes, state_row
from . import jobs, journal_sql, sql
from .journal import Query, Write
from .writer import Conn

#: keys a call of :meth:`SQLiteRetention.prune_dedup_keys` may visit per key it may
#: delete, and at least
KEYS_WALKED = 16
KEYS_WINDOW_MIN = 4096


def release_refs(conn: Conn, thread_id: str, refs: set[str], note: str) -> None:
    """Drop the thread's refs to ``refs`` that no whole tool result of it still shows and
    no part of its messages or inputs holds, and the blobs no thread refers to any more."""
    for ref in sorted(refs):
        if conn.execute(journal_sql.REF_SHOWN, (thread_id, BLOB_LINE + ref, note)).fetchone() is not None:
            continue
        if conn.execute(journal_sql.REF_IN_PARTS, (thread_id, ref)).fetchone() is not None:
            continue
        conn.execute(journal_sql.DROP_REF, (thread_id, ref))
        if conn.changes() and conn.execute(sql.REF_USED, (ref,)).fetchone() is None:
            conn.execute(sql.DROP_CHUNKS, (ref,))
            conn.execute(sql.DROP_BLOB, (ref,))


class SQLiteRetention:
    """Retention tiers, journal folding, fork and the figures the exporter shows."""

    def __init__(self, write: Write, query: Query, clock: Callable[[], float]) -> None:
        self._write = write
        self._query = query
        self.clock = clock
        # where the walk of the dedup keys goes on (None: from the first key)
        self._key_cursor: tuple[str, str] | None = None

    async def shrink_tool_results(
        self, thread_id: str, keep: int, head_chars: int, note: str, limit: int
    ) -> int:
        """Cut old tool results to their head and ``note``, drop the blob refs no whole
        result shows any more (and the blobs left unreferenced); how many were cut."""

        def job(conn: Conn) -> int:
            picked = conn.execute(
                journal_sql.SHRINK_PICK,
                (thread_id, keep, head_chars, note, limit, len(BLOB_LINE), BLOB_LINE, REF_CHARS),
            ).fetchall()
            conn.executemany(journal_sql.SHRINK_ONE, [(head_chars, note, row[0]) for row in picked])
            release_refs(conn, thread_id, {row[1] for row in picked if row[1]}, note)
            return len(picked)

        result: int = await self._write(job, 256)
        return result

    async def demote_parts(self, thread_id: str, keep: int, note: str, limit: int) -> int:
        """Drop the blob references of old messages' parts, release the blobs nothing
        refers to any more (see the Backend protocol); how many messages changed."""

        def job(conn: Conn) -> int:
            picked = conn.execute(journal_sql.PARTS_PICK, (thread_id, keep, limit)).fetchall()
            conn.executemany(journal_sql.PARTS_DEMOTE, [(row[0],) for row in picked])
            refs = {ref for row in picked for ref in json.loads(row[1])}
            release_refs(conn, thread_id, refs, note)
            return len(picked)

        result: int = await self._write(job, 256)
        return result

    async def prune_history(
        self, thread_id: str, keep_runs: int, keep_tool_calls: int, note: str, limit: int, policy: str
    ) -> int:
        """Delete the oldest messages before the thread's ``keep_runs``-th newest run and
        the run of its oldest whole tool result that its summary covers, whole runs at a
        time, about ``limit`` at most; how many."""

        def job(conn: Conn) -> int:
            row = conn.execute(journal_sql.HISTORY_BOUND, (thread_id, keep_runs, keep_tool_calls)).fetchone()
            if row is None or row[1] is None or row[1] >= row[0]:
                return 0
            bound, first = int(row[0]), int(row[1])
            cut = bound
            if bound - first > limit:  # whole runs, as many as fit in limit (at least one)
                lo, hi = conn.execute(journal_sql.RUN_STARTS, (thread_id, first, first + limit)).fetchone()
                if hi is None:
                    lo, _ = conn.execute(journal_sql.RUN_STARTS, (thread_id, first, bound)).fetchone()
                cut = min(bound, int(hi if hi is not None else lo if lo is not None else bound))
            params = (thread_id, cut, len(BLOB_LINE), REF_CHARS, BLOB_LINE)
            refs = {r[0] for r in conn.execute(journal_sql.HISTORY_REFS, params).fetchall()}
            refs |= {r[0] for r in conn.execute(journal_sql.HISTORY_PART_REFS, (thread_id, cut)).fetchall()}
            conn.execute(journal_sql.DROP_HISTORY, (thread_id, cut))
            deleted = int(conn.changes())
            release_refs(conn, thread_id, refs, note)
            if deleted:
                conn.execute(journal_sql.MARK_PRUNED, (thread_id, deleted, cut - 1, policy, self.clock()))
            return deleted

        result: int = await self._write(job, 256)
        return result

    async def retention_mark(self, thread_id: str) -> RetentionMark | None:
        """The thread's retention mark (None: nothing of its history deleted)."""
        rows = self._query(journal_sql.RETENTION_MARK, (thread_id,))
        if not rows:
            return None
        pruned, upto, policy, at = rows[0]
        return RetentionMark(pruned=int(pruned), up_to_seq=int(upto), policy=str(policy), pruned_at=float(at))

    async def prune_dedup_keys(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` dedup keys admitted before ``before`` whose input was
        consumed and that no outbox entry names; how many.

        No index orders the keys by age (it cost as many bytes per key as the key), so a
        call walks the primary key on from where the last one stopped (in RAM: a restart
        walks from the first key), visiting at most :data:`KEYS_WALKED` per allowed key
        (at least :data:`KEYS_WINDOW_MIN`), and starts again from the first key past the last. A table of
        fewer keys is read whole each call; a larger one is read whole every
        ``keys / window`` calls, so a key is forgotten at most that many passes after
        its horizon."""
        window = max(KEYS_WALKED * limit, KEYS_WINDOW_MIN)

        def job(conn: Conn) -> int:
            start = self._key_cursor
            low = (None, None) if start is None else start
            end = conn.execute(journal_sql.KEYS_WINDOW_END, (*low, window)).fetchone()
            high = (None, None) if end is None else (str(end[0]), str(end[1]))
            gone = conn.execute(journal_sql.PRUNE_KEYS, (*low, *high, before, limit)).fetchall()
            if len(gone) >= limit:  # the window may hold more: the next call goes on after them
                self._key_cursor = max((str(t), str(k)) for t, k in gone)
            else:
                self._key_cursor = None if end is None else (str(end[0]), str(end[1]))
            return len(gone)

        result: int = await self._write(job, 256)
        return result

    async def prune_summaries(self, thread_id: str, keep: int, limit: int) -> int:
        """Delete up to ``limit`` summaries nothing can read any more (see the Backend
        protocol); how many."""

        def job(conn: Conn) -> int:
            conn.execute(journal_sql.PRUNE_SUMMARIES, (thread_id, keep, limit))
            return int(conn.changes())

        result: int = await self._write(job, 256)
        return result

    async def drop_superseded(self, thread_id: str, upto_run: int, limit: int) -> int:
        """Delete up to ``limit`` change records of runs <= ``upto_run`` that a later change
        of the same key in the same run supersedes; how many."""

        def job(conn: Conn) -> int:
            conn.execute(journal_sql.DROP_SUPERSEDED, (thread_id, upto_run, limit))
            return int(conn.changes())

        result: int = await self._write(job, 256)
        return result

    async def last_change_of_run(self, thread_id: str, upto_run: int) -> int | None:
        """The seq of the newest change record of runs <= ``upto_run`` (None: none)."""
        rows = self._query(journal_sql.LAST_CHANGE_OF_RUN, (thread_id, upto_run))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def full_checkpoint_upto(self, thread_id: str, upto: int) -> JournalEntry | None:
        """The newest recoverable full checkpoint covering no more than journal seq ``upto``."""
        rows = self._query(journal_sql.FULL_UPTO, (thread_id, upto))
        return row_journal(rows[0]) if rows else None

    async def fold_journal(self, thread_id: str, upto: int, before: int, limit: int) -> int:
        """Delete up to ``limit`` change records with seq <= ``upto`` and checkpoint headers
        with seq < ``before`` (with their body pieces); rows deleted."""

        def job(conn: Conn) -> int:
            conn.execute(journal_sql.FOLD_ROWS, (thread_id, upto, before, limit))
            deleted = int(conn.changes())
            conn.execute(journal_sql.FOLD_PARTS, (thread_id, before))
            return deleted + int(conn.changes())

        result: int = await self._write(job, 256)
        return result

    async def journal_seq_at(self, thread_id: str, msg_seq: int) -> int:
        """The newest change record written with the thread at message seq <= ``msg_seq`` (0: none)."""
        return int(self._query(journal_sql.JOURNAL_SEQ_AT, (thread_id, msg_seq))[0][0])

    async def fork_thread(self, source: str, new_id: str, at_seq: int, state: Mapping[str, str]) -> Thread:
        """A new thread of ``source``'s agent branching from its history at ``at_seq`` (a
        child whose views read it), its state ``state`` journaled as ``add`` records; one
        transaction. NotFound if ``source`` is missing, UsageError if ``new_id`` exists."""
        now = self.clock()
        rows = [(new_id, n, "add", k, v, 0, now, 0) for n, (k, v) in enumerate(sorted(state.items()), 1)]
        row = state_row(state)

        def job(conn: Conn) -> Thread:
            agent = conn.execute(journal_sql.THREAD_AGENT, (source,)).fetchone()
            if agent is None:
                raise NotFound(f"no thread {source!r}")
            if not jobs.insert_thread(conn, new_id, agent[0], now, (source, at_seq)):
                raise UsageError(f"thread {new_id!r} exists already")
            conn.executemany(journal_sql.INSERT_CHANGE, rows)
            conn.execute(sql.SET_THREAD_STATE, (*row, new_id))
            thread = jobs.get_thread(conn, new_id)
            assert thread is not None
            return thread

        result: Thread = await self._write(job, sum(len(k) + len(v) for k, v in state.items()) + 256)
        return result

    async def tier_sizes(self, note: str) -> TierSizes:
        """Bytes each retention tier takes (``note``: what a cut tool result ends with)."""
        return row_tier_sizes(self._query(journal_sql.TIER_SIZES, (note,))[0])

    async def journal_totals(self) -> tuple[float | None, int, int, int, int]:
        """(newest recoverable checkpoint's time or None, its bytes, bytes of each thread's
        newest full checkpoint, of the increments after them, change records after the
        newest checkpoints)."""
        last = self._query(journal_sql.LAST_CHECKPOINT, ())
        full, increments, changes = self._query(journal_sql.RECOVERY_READS, ())[0]
        at, size = (float(last[0][0]), int(last[0][1])) if last else (None, 0)
        return at, size, int(full), int(increments), int(changes)

    async def oldest_ready_at(self, now: float) -> float | None:
        """When the oldest input a thread could consume now was admitted (None: none)."""
        rows = self._query(sql.OLDEST_READY, (now,))
        return float(rows[0][0]) if rows and rows[0][0] is not None else None
