"""Retention's row operations on PostgreSQL (see :class:`~dormant.store.backend.Backend`).

Single statements go through the group-committing writer; the cuts that may release
blobs (:meth:`PgRetention.shrink_tool_results`, :meth:`PgRetention.demote_parts`,
:meth:`PgRetention.prune_history`)
run as one transaction on a pooled connection, like thread deletion: message rows
first, then the blob rows ``FOR UPDATE``, and only then, in a later statement (a
fresh snapshot), the check that no thread refers to them, so a blob gaining a
reference concurrently is never collected (:mod:`dormant.store.postgres.blobs`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from ...errors import NotFound, UsageError
from ...records import JournalEntry, RetentionMark, Thread, TierSizes
from ...tools.blobs import BLOB_LINE, REF_CHARS
from ..rows import row_journal, row_thread, row_tier_sizes, state_row
from . import parts_sql, sql
from .driver import Conn, Rows, translate
from .reads import PgReads
from .writer import Job


class PgRetention:
    """Retention tiers, journal folding, fork and the figures the exporter shows."""

    def __init__(
        self,
        reads: PgReads,
        pool: Callable[[], AsyncConnectionPool[Conn]],
        write: Callable[[Job, int], Awaitable[Any]],
        clock: Callable[[], float],
        lock_timeout_s: float,
    ) -> None:
        self.reads = reads
        self.pool = pool
        self.write = write
        self.clock = clock
        self.lock_timeout_s = lock_timeout_s

    async def _release(self, conn: Conn, thread_id: str, refs: set[str], note: str) -> None:
        """Drop the thread's refs no whole tool result shows and no part of its messages
        or inputs holds any more; delete the blobs then unreferenced (rows locked first,
        looked for in a later statement)."""
        dropped: list[str] = []
        for ref in sorted(refs):
            shown = await conn.execute(
                sql.REF_SHOWN, {"id": thread_id, "shown": BLOB_LINE + ref, "note": note}
            )
            if await shown.fetchone() is not None:
                continue
            held = await conn.execute(parts_sql.REF_IN_PARTS, {"id": thread_id, "ref": ref})
            if await held.fetchone() is not None:
                continue
            cursor = await conn.execute(sql.DROP_REF, (thread_id, ref))
            if cursor.rowcount:
                dropped.append(ref)
        if dropped:
            await conn.execute(sql.LOCK_BLOBS, (dropped,))
            cursor = await conn.execute(sql.DELETE_UNUSED_BLOBS, (dropped,))
            unused = [r[0] for r in await cursor.fetchall()]
            if unused:
                await conn.execute(sql.DELETE_BLOB_CHUNKS, (unused,))

    async def shrink_tool_results(
        self, thread_id: str, keep: int, head_chars: int, note: str, limit: int
    ) -> int:
        """Cut old tool results to their head and ``note``; release their blobs; how many."""
        params = {
            "id": thread_id,
            "keep": keep,
            "head": head_chars,
            "note": note,
            "limit": limit,
            "plen": len(BLOB_LINE),
            "line": BLOB_LINE,
            "rlen": REF_CHARS,
        }
        try:
            async with self.pool().connection() as conn, conn.transaction():
                await conn.execute(sql.SET_LOCAL_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)))
                picked = await (await conn.execute(sql.SHRINK_PICK, params)).fetchall()
                if not picked:
                    return 0
                await conn.execute(sql.SHRINK_SEQS, {**params, "seqs": [r[0] for r in picked]})
                await self._release(conn, thread_id, {r[1] for r in picked if r[1]}, note)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return len(picked)

    async def demote_parts(self, thread_id: str, keep: int, note: str, limit: int) -> int:
        """Drop the blob references of old messages' parts and release the blobs nothing
        refers to any more (see the Backend protocol); how many messages changed."""
        params = {"id": thread_id, "keep": keep, "limit": limit}
        try:
            async with self.pool().connection() as conn, conn.transaction():
                await conn.execute(sql.SET_LOCAL_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)))
                picked = await (await conn.execute(parts_sql.PARTS_PICK, params)).fetchall()
                if not picked:
                    return 0
                await conn.execute(parts_sql.PARTS_DEMOTE, {"id": thread_id, "seqs": [r[0] for r in picked]})
                await self._release(conn, thread_id, {ref for r in picked for ref in r[1]}, note)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return len(picked)

    async def prune_history(
        self, thread_id: str, keep_runs: int, keep_tool_calls: int, note: str, limit: int, policy: str
    ) -> int:
        """Delete whole old runs covered by the thread's summary (see the Backend protocol)."""
        try:
            async with self.pool().connection() as conn, conn.transaction():
                await conn.execute(sql.SET_LOCAL_LOCK_TIMEOUT.format(ms=int(self.lock_timeout_s * 1000)))
                row = await (
                    await conn.execute(
                        sql.HISTORY_BOUND, {"id": thread_id, "runs": keep_runs, "tools": keep_tool_calls}
                    )
                ).fetchone()
                if row is None or row[1] is None or row[1] >= row[0]:
                    return 0
                bound, first = int(row[0]), int(row[1])
                cut = bound
                if bound - first > limit:  # whole runs, as many as fit in limit (at least one)
                    starts = conn.execute(sql.RUN_STARTS, (thread_id, first, first + limit))
                    lo, hi = await (await starts).fetchone() or (None, None)
                    if hi is None:
                        starts = conn.execute(sql.RUN_STARTS, (thread_id, first, bound))
                        lo, _ = await (await starts).fetchone() or (None, None)
                    cut = min(bound, int(hi if hi is not None else lo if lo is not None else bound))
                found = await conn.execute(
                    sql.HISTORY_REFS,
                    {
                        "id": thread_id,
                        "cut": cut,
                        "plen": len(BLOB_LINE),
                        "rlen": REF_CHARS,
                        "line": BLOB_LINE,
                    },
                )
                refs = {r[0] for r in await found.fetchall()}
                held = await conn.execute(parts_sql.HISTORY_PART_REFS, {"id": thread_id, "cut": cut})
                refs |= {r[0] for r in await held.fetchall()}
                deleted = (await conn.execute(sql.DROP_HISTORY, (thread_id, cut))).rowcount
                await self._release(conn, thread_id, refs, note)
                if deleted:
                    mark = (thread_id, deleted, cut - 1, policy, self.clock())
                    await conn.execute(sql.MARK_PRUNED, mark)
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc) from exc
        return int(deleted)

    async def retention_mark(self, thread_id: str) -> RetentionMark | None:
        """The thread's retention mark (None: nothing of its history deleted)."""
        rows = await self.reads.rows(sql.RETENTION_MARK, (thread_id,))
        if not rows:
            return None
        pruned, upto, policy, at = rows[0]
        return RetentionMark(pruned=int(pruned), up_to_seq=int(upto), policy=str(policy), pruned_at=float(at))

    async def prune_dedup_keys(self, before: float, limit: int) -> int:
        """Delete up to ``limit`` dedup keys past the horizon (see the Backend protocol)."""
        job = Job(sql.PRUNE_KEYS, {"before": before, "limit": limit}, lambda rows, count: count)
        result: int = await self.write(job, 256)
        return result

    async def prune_summaries(self, thread_id: str, keep: int, limit: int) -> int:
        """Delete up to ``limit`` summaries nothing can read any more; how many."""
        params = {"id": thread_id, "keep": keep, "limit": limit}
        result: int = await self.write(Job(sql.PRUNE_SUMMARIES, params, lambda rows, count: count), 256)
        return result

    async def drop_superseded(self, thread_id: str, upto_run: int, limit: int) -> int:
        """Delete superseded change records of runs <= ``upto_run``; how many."""
        params = {"id": thread_id, "run": upto_run, "limit": limit}
        result: int = await self.write(Job(sql.DROP_SUPERSEDED, params, lambda rows, count: count), 256)
        return result

    async def last_change_of_run(self, thread_id: str, upto_run: int) -> int | None:
        """The seq of the newest change record of runs <= ``upto_run`` (None: none)."""
        rows = await self.reads.rows(sql.LAST_CHANGE_OF_RUN, (thread_id, upto_run))
        return int(rows[0][0]) if rows and rows[0][0] is not None else None

    async def full_checkpoint_upto(self, thread_id: str, upto: int) -> JournalEntry | None:
        """The newest recoverable full checkpoint covering no more than ``upto``."""
        rows = await self.reads.rows(sql.FULL_UPTO, (thread_id, upto))
        return row_journal(rows[0]) if rows else None

    async def fold_journal(self, thread_id: str, upto: int, before: int, limit: int) -> int:
        """Delete folded change records, older checkpoint headers and their pieces."""
        params = {"id": thread_id, "upto": upto, "before": before, "limit": limit}
        job = Job(sql.FOLD_ROWS, params, lambda rows, count: int(rows[0][0]) if rows else 0)
        result: int = await self.write(job, 256)
        return result

    async def journal_seq_at(self, thread_id: str, msg_seq: int) -> int:
        """The newest change record written at message seq <= ``msg_seq`` (0: none)."""
        rows = await self.reads.rows(sql.JOURNAL_SEQ_AT, (thread_id, msg_seq))
        return int(rows[0][0])

    async def fork_thread(self, source: str, new_id: str, at_seq: int, state: Mapping[str, str]) -> Thread:
        """A child of ``source`` at ``at_seq`` with ``state`` journaled (see the Backend protocol)."""
        items = sorted(state.items())
        params = {
            "new": new_id,
            "src": source,
            "at": at_seq,
            "now": self.clock(),
            "keys": [k for k, _ in items],
            "values": [v for _, v in items],
        }
        params["state"], params["subject"] = state_row(state)

        def decode(rows: Rows, count: int) -> Thread | None:
            return row_thread(rows[0]) if rows else None

        size = sum(len(k) + len(v) for k, v in items) + 256
        made: Thread | None = await self.write(Job(sql.FORK_THREAD, params, decode, threads=(source,)), size)
        if made is not None:
            return made
        if await self.reads.get_thread(new_id) is not None:
            raise UsageError(f"thread {new_id!r} exists already")
        raise NotFound(f"no thread {source!r}")

    async def tier_sizes(self, note: str) -> TierSizes:
        """Bytes each retention tier takes."""
        return row_tier_sizes((await self.reads.rows(sql.TIER_SIZES, {"note": note}))[0])

    async def journal_totals(self) -> tuple[float | None, int, int, int, int]:
        """The newest checkpoint's time and bytes; recovery's reads (see the Backend protocol)."""
        last = await self.reads.rows(sql.LAST_CHECKPOINT)
        full, increments, changes = (await self.reads.rows(sql.RECOVERY_READS))[0]
        at, size = (float(last[0][0]), int(last[0][1])) if last else (None, 0)
        return at, size, int(full), int(increments), int(changes)

    async def oldest_ready_at(self, now: float) -> float | None:
        """When the oldest input a thread could consume now was admitted (None: none)."""
        rows = await self.reads.rows(sql.OLDEST_READY, (now,))
        return float(rows[0][0]) if rows and rows[0][0] is not None else None
