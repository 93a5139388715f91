"""The SQLite backend's slice reads, and the claim-batch load that serves them (and the
model figures of its status).

A claim batch's slices are loaded in one statement: the first slice of a batch to
load reads the rows of every thread of the batch (``LOAD_SLICES``) and parks each
thread's rows here until its slice asks. Loading early is safe: while the lease is
held only this slice changes the thread row or consumes its inputs, so the rows
stay true; an input admitted in between is left for the thread's next slice, as
one admitted just after the load would be.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any

import apsw

from ...records import WAIT_REASONS_SHOWN, Claim, Input, Message, Summary, Thread
from ..rows import THREAD_WIDTH, row_input, row_message, row_summary, row_thread, usage_and_waits
from . import sql
from .connect import translate

Conn = Any

#: Claim batches whose slices may still load from a batch load (older ones are dropped:
#: a slice that never loads, cancelled say, must not pin its batch's rows).
CLAIM_BATCHES_KEPT = 8
#: Bytes of rows one batch load parks at most (input text plus ROW_OVERHEAD a row), so
#: parked rows never hold more than CLAIM_BATCHES_KEPT x PARKED_BYTES.
PARKED_BYTES = 2 * 1024 * 1024
ROW_OVERHEAD = 512


class ClaimBatches:
    """Recent claim batches and the rows their first load parked (bounded, see above)."""

    def __init__(self) -> None:
        # token -> (thread ids, loaded yet)
        self._batches: OrderedDict[str, tuple[list[str], bool]] = OrderedDict()
        # (token, thread id) -> (max_inputs, rows)
        self._loaded: dict[tuple[str, str], tuple[int, list[Any]]] = {}

    def claimed(self, claims: list[Claim]) -> None:
        """Remember a claim batch (of more than one thread) for a batch load."""
        if len(claims) > 1:
            self._batches[claims[0].token] = ([c.thread_id for c in claims], False)
            while len(self._batches) > CLAIM_BATCHES_KEPT:
                self._forget(next(iter(self._batches)))

    def clear(self) -> None:
        """Forget every batch and parked row."""
        self._batches.clear()
        self._loaded.clear()

    def _forget(self, token: str) -> None:
        ids, _ = self._batches.pop(token, ((), True))
        for thread_id in ids:
            self._loaded.pop((token, thread_id), None)

    def rows(self, conn: Conn, claim: Claim, max_inputs: int, max_bytes: int, now: float) -> list[Any]:
        """The LOAD_SLICE rows of ``claim``, loaded with the rest of its claim batch."""
        token = claim.token
        parked = self._loaded.pop((token, claim.thread_id), None)
        batch = self._batches.get(token)
        if parked is None and batch is not None and not batch[1]:
            ids = batch[0]
            self._batches[token] = (ids, True)
            parked_bytes = 0
            for row in conn.execute(sql.LOAD_SLICES, (now, sql.encode(ids).decode(), max_inputs)):
                parked_bytes += ROW_OVERHEAD + len(row[THREAD_WIDTH + 4] or "") + len(row[-1] or "")
                if parked_bytes > PARKED_BYTES:
                    # the rest of the batch (and this thread, whose rows may be partial)
                    # loads slice by slice
                    self._loaded.pop((token, row[0]), None)
                    break
                entry = self._loaded.get((token, row[0]))
                if entry is None:
                    self._loaded[(token, row[0])] = (max_inputs, [row])
                else:
                    entry[1].append(row)
            parked = self._loaded.pop((token, claim.thread_id), None)
        if parked is not None and parked[0] == max_inputs:
            return parked[1]
        rows: list[Any] = conn.execute(
            sql.LOAD_SLICE, (now, claim.thread_id, max_inputs, max_bytes)
        ).fetchall()
        return rows


class SQLiteReader:
    """A :class:`~dormant.store.backend.SliceReader` on one connection (its own async
    context manager: nothing to acquire or release)."""

    __slots__ = ("batches", "clock", "conn")

    def __init__(self, conn: Conn, batches: ClaimBatches, clock: Callable[[], float]) -> None:
        self.conn = conn
        self.batches = batches
        self.clock = clock

    async def __aenter__(self) -> SQLiteReader:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    async def slice_rows(
        self, claim: Claim, max_inputs: int, max_bytes: int
    ) -> tuple[Thread, list[Input], str | None] | None:
        """The thread row, its state column and ready inputs of a claimed thread."""
        try:
            rows = self.batches.rows(self.conn, claim, max_inputs, max_bytes, self.clock())
        except apsw.Error as exc:
            raise translate(exc) from exc
        if not rows:
            return None
        # one row per input, or one row with NULL input columns
        inputs = [row_input(row[THREAD_WIDTH:]) for row in rows if row[THREAD_WIDTH] is not None]
        return row_thread(rows[0]), inputs, rows[0][-1]

    async def newest_messages(self, thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        """Messages in (min_seq, max_seq], newest first."""
        try:
            return [
                row_message(r)
                for r in self.conn.execute(sql.NEWEST_MESSAGES, (thread_id, max_seq, min_seq, limit))
            ]
        except apsw.Error as exc:
            raise translate(exc) from exc

    async def parent_link(self, thread_id: str) -> tuple[str, int] | None:
        """(parent, spawn seq) of a thread, None for a root."""
        try:
            row = self.conn.execute(sql.PARENT_OF, (thread_id,)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return (row[0], row[1]) if row and row[0] else None

    async def summary_at(self, thread_id: str, upto_seq: int) -> Summary | None:
        """The thread's summary up to ``upto_seq``."""
        try:
            row = self.conn.execute(sql.SUMMARY_AT, (thread_id, upto_seq)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return row_summary(row) if row else None

    async def summary_inherited(self, thread_id: str, parent_seq: int) -> Summary | None:
        """The newest summary made at or before ``parent_seq``."""
        try:
            row = self.conn.execute(sql.SUMMARY_INHERITED, (thread_id, parent_seq)).fetchone()
        except apsw.Error as exc:
            raise translate(exc) from exc
        return row_summary(row) if row else None


def model_figures(query: Callable[[str, Sequence[Any]], list[Any]], tenant: str | None) -> dict[str, Any]:
    """The model usage and wait fields of a :class:`~dormant.records.StoreStatus` (all
    threads, or ``tenant``'s), read with ``query``."""
    if tenant is None:
        return usage_and_waits(
            query(sql.USAGE_TOTALS, ())[0],
            query(sql.WAITING, ())[0],
            query(sql.WAITING_BY_REASON, (WAIT_REASONS_SHOWN,)),
        )
    return usage_and_waits(
        query(sql.TENANT_USAGE_TOTALS, (tenant,))[0],
        query(sql.TENANT_WAITING, (tenant,))[0],
        query(sql.TENANT_WAITING_BY_REASON, (tenant, WAIT_REASONS_SHOWN)),
    )
