"""The state journal over a backend: recovery, checkpoint writes, paged reads, figures.

Change records are written by :meth:`~dormant.store.core.StoreCore.commit_slice`
(``CommitPlan.state``) in the slice's transaction. A checkpoint is written in
steps, each its own transaction: (1) its header (``recoverable`` false), (2) its
body in pieces, (3) the pieces read back and their digest checked, then the header
marked recoverable. A crash anywhere before (3) ends leaves a header that recovery
ignores, so the last recoverable checkpoint stays usable; the change records stay
the truth either way (:mod:`dormant.journal.rules`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import NotFound, StoreError, UsageError
from ..journal import rules as journal
from ..records import JournalEntry, Page
from .backend import Backend
from .base import clamp_limit, seq_cursor

#: Journal rows read per page while recovering.
READ_PAGE = 500


@dataclass(frozen=True, slots=True)
class Recovered:
    """A thread's state as recovered, and what recovery read to get it."""

    state: journal.State
    #: the journal seq the state is complete up to
    upto: int
    #: seq of the checkpoint the state continues (0: none), the base of the next increment
    base: int
    #: net changes since ``base`` (what an incremental checkpoint would hold)
    delta: journal.Delta
    full: JournalEntry | None
    increments: int
    increment_bytes: int
    replayed: int
    #: the thread's message seq the state goes with (that of the last entry applied)
    msg_seq: int = 0


@dataclass(frozen=True, slots=True)
class JournalFigures:
    """What the metrics exporter shows for one thread's journal."""

    last_checkpoint_age_s: float | None
    last_checkpoint_bytes: int
    full_bytes: int
    increment_bytes: int
    pending_changes: int
    recovery_s: float


class StateJournal:
    """Recovery, checkpoints and paged reads of the state journal (part of the core)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    async def entries(
        self, thread_id: str, *, cursor: str | None = None, limit: int = 50
    ) -> Page[JournalEntry]:
        """One page of a thread's journal by seq (NotFound if the thread is missing)."""
        limit = clamp_limit(limit)
        rows = await self.backend.journal.journal_rows(thread_id, seq_cursor(cursor, default=0), limit + 1)
        if rows is None:
            raise NotFound(f"no thread {thread_id!r}")
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=str(items[-1].seq) if len(rows) > limit and items else None)

    async def _body(self, entry: JournalEntry) -> str:
        pieces: list[str] = []
        while len(pieces) < entry.parts:
            page = await self.backend.journal.checkpoint_parts(entry.thread_id, entry.seq, len(pieces), 64)
            if not page:
                break
            pieces.extend(page)
        body = "".join(pieces)
        if len(pieces) != entry.parts or journal.digest(body) != entry.digest:
            raise StoreError(
                f"checkpoint {entry.seq} of thread {entry.thread_id!r} does not match its digest"
            )
        return body

    async def recover(self, thread_id: str) -> Recovered:
        """The newest recoverable full checkpoint, the recoverable increments that
        continue it, then the change records after them (NotFound if the thread is missing)."""
        full = await self.backend.journal.newest_checkpoint(thread_id, "full")
        state: journal.State = journal.decode_full(await self._body(full)) if full else {}
        upto = full.upto if full else 0
        base = full.seq if full else 0
        msg_seq = full.msg_seq if full else 0
        increments = increment_bytes = 0
        after = base
        while True:
            heads = await self.backend.journal.checkpoints_after(thread_id, after, 64)
            for head in heads:
                after = head.seq
                if head.kind != "incremental":
                    continue
                body = journal.decode_increment(await self._body(head))
                if body.base != base:
                    continue  # not a continuation of the chain applied so far
                journal.apply_delta(state, body.changes)
                upto, base, msg_seq = head.upto, head.seq, head.msg_seq
                increments += 1
                increment_bytes += head.size
            if len(heads) < 64:
                break
        delta: journal.Delta = {}
        replayed = 0
        cursor = upto
        while True:
            rows = await self.backend.journal.journal_rows(thread_id, cursor, READ_PAGE)
            if rows is None:
                raise NotFound(f"no thread {thread_id!r}")
            for row in rows:
                cursor = row.seq
                if row.kind in ("add", "update", "delete") and row.key is not None:
                    journal.apply(state, row)
                    delta[row.key] = row.value if row.kind != "delete" else None
                    upto, msg_seq = row.seq, row.msg_seq
                    replayed += 1
            if len(rows) < READ_PAGE:
                break
        return Recovered(state, upto, base, delta, full, increments, increment_bytes, replayed, msg_seq)

    async def state_at(self, thread_id: str, at_seq: int) -> journal.State:
        """The thread's state as it was at journal seq ``at_seq`` (time travel: the newest
        recoverable full checkpoint covering no more than that, then a replay of the
        change records up to it; the journal is never rewritten).

        Exact within the run tiers retention keeps whole; in older runs it is exact at
        each run's end (retention keeps the last change of each key per run). UsageError
        when the change records up to ``at_seq`` were folded into a later checkpoint.
        """
        full = await self.backend.retention.full_checkpoint_upto(thread_id, at_seq)
        state: journal.State = journal.decode_full(await self._body(full)) if full else {}
        cursor = full.upto if full else 0
        first = True
        while cursor < at_seq:
            rows = await self.backend.journal.journal_rows(thread_id, cursor, READ_PAGE)
            if rows is None:
                raise NotFound(f"no thread {thread_id!r}")
            if first and full is None:
                await self._check_not_folded(thread_id, at_seq, rows)
                first = False
            for row in rows:
                if row.seq > at_seq:
                    return state
                journal.apply(state, row)
            if len(rows) < READ_PAGE:
                break
            cursor = rows[-1].seq
        return state

    async def _check_not_folded(self, thread_id: str, at_seq: int, rows: list[JournalEntry]) -> None:
        """UsageError if the records before ``at_seq`` were folded: the oldest full
        checkpoint covers past ``at_seq`` and no change record it covers is left."""
        heads = await self.backend.journal.checkpoints_after(thread_id, 0, 1)
        oldest = heads[0] if heads and heads[0].kind == "full" else None
        if oldest is not None and at_seq < oldest.upto and (not rows or rows[0].seq > oldest.upto):
            raise UsageError(
                f"the state of thread {thread_id!r} before journal seq {oldest.upto} was folded "
                "into a checkpoint by retention"
            )

    async def state_at_message(self, thread_id: str, msg_seq: int) -> journal.State:
        """The thread's state as it was when its last message seq was ``msg_seq``."""
        at = await self.backend.retention.journal_seq_at(thread_id, msg_seq)
        return await self.state_at(thread_id, at) if at else {}

    async def apply_tiers(self, thread_id: str, *, full_runs: int, metric_runs: int, limit: int) -> int:
        """Retention of the journal (see :mod:`dormant.retention.policy`): change records of runs
        before the newest ``full_runs`` keep only the last change of each key per run;
        those of runs before the ``metric_runs`` after them are folded into the newest
        recoverable full checkpoint that covers them (with every older checkpoint). At
        most about ``limit`` rows per step; rows deleted."""
        runs = await self.backend.journal.thread_runs(thread_id)
        if runs is None:
            raise NotFound(f"no thread {thread_id!r}")
        past_full = runs - full_runs
        if past_full < 1:
            return 0
        deleted = await self.backend.retention.drop_superseded(thread_id, past_full, limit)
        past_metric = past_full - metric_runs
        if past_metric < 1:
            return deleted
        boundary = await self.backend.retention.last_change_of_run(thread_id, past_metric)
        if boundary is None:
            return deleted
        full = await self.backend.retention.full_checkpoint_upto(thread_id, boundary)
        if full is None:
            return deleted  # nothing covers them yet: a full checkpoint comes every full_runs runs
        return deleted + await self.backend.retention.fold_journal(thread_id, full.upto, full.seq, limit)

    async def checkpoint(self, thread_id: str, kind: str, part_chars: int = 64 * 1024) -> JournalEntry | None:
        """Write a checkpoint of ``kind`` (``full`` or ``incremental``) and mark it
        recoverable once verified; the header (None: nothing changed since the last one)."""
        if kind not in ("full", "incremental"):
            raise ValueError(f"a checkpoint is full or incremental, not {kind!r}")
        got = await self.recover(thread_id)
        if kind == "incremental" and not got.delta:
            return None
        if kind == "incremental" and got.full is None:
            kind = "full"  # an increment needs a full checkpoint to continue
        body = (
            journal.encode_full(got.state)
            if kind == "full"
            else journal.encode_increment(got.base, got.delta)
        )
        pieces = journal.split(body, part_chars)
        head = await self.backend.journal.begin_checkpoint(
            thread_id, kind, got.upto, len(pieces), len(body.encode()), journal.digest(body), got.msg_seq
        )
        for first in range(0, len(pieces), 16):
            await self.backend.journal.put_checkpoint_parts(
                thread_id, head.seq, first, pieces[first : first + 16]
            )
        await self._body(head)  # read back: every piece there, digest right
        if not await self.backend.journal.mark_recoverable(thread_id, head.seq):
            raise StoreError(f"checkpoint {head.seq} of thread {thread_id!r} could not be marked recoverable")
        return await self.backend.journal.newest_checkpoint(thread_id, kind)

    async def maybe_checkpoint(
        self, thread_id: str, policy: journal.CheckpointPolicy, now: float
    ) -> JournalEntry | None:
        """Write the checkpoint ``policy`` says is due, if any; its header."""
        runs = await self.backend.journal.thread_runs(thread_id)
        if runs is None:
            raise NotFound(f"no thread {thread_id!r}")
        got = await self.recover(thread_id)
        last_any = got.full
        if got.base and (got.full is None or got.base != got.full.seq):
            heads = await self.backend.journal.checkpoints_after(thread_id, got.base - 1, 1)
            last_any = heads[0] if heads else got.full
        kind = journal.due(
            policy,
            now=now,
            runs=runs,
            last_full=got.full,
            last_any=last_any,
            increment_bytes=got.increment_bytes,
            changed=bool(got.delta),
        )
        return await self.checkpoint(thread_id, kind, policy.part_chars) if kind else None

    async def figures(self, thread_id: str, now: float) -> JournalFigures:
        """Last checkpoint age and size, and the estimated recovery time."""
        got = await self.recover(thread_id)
        full_bytes = got.full.size if got.full else 0
        newest = got.full
        if got.base and got.full is not None and got.base != got.full.seq:
            heads = await self.backend.journal.checkpoints_after(thread_id, got.base - 1, 1)
            newest = heads[0] if heads else newest
        return JournalFigures(
            last_checkpoint_age_s=now - newest.created_at if newest else None,
            last_checkpoint_bytes=newest.size if newest else 0,
            full_bytes=full_bytes,
            increment_bytes=got.increment_bytes,
            pending_changes=got.replayed,
            recovery_s=journal.recovery_seconds(full_bytes, got.increment_bytes, got.replayed),
        )

    async def totals(self, now: float) -> JournalFigures:
        """The same figures for the whole store: the newest checkpoint's age and size, and
        the estimated time to recover every thread's state (what the metrics exporter
        shows; a few aggregate queries over the checkpoint headers and change records)."""
        at, size, full_bytes, increment_bytes, changes = await self.backend.retention.journal_totals()
        return JournalFigures(
            last_checkpoint_age_s=None if at is None else max(0.0, now - at),
            last_checkpoint_bytes=size,
            full_bytes=full_bytes,
            increment_bytes=increment_bytes,
            pending_changes=changes,
            recovery_s=journal.recovery_seconds(full_bytes, increment_bytes, changes),
        )

    async def checkpoint_state(self, thread_id: str, seq: int) -> tuple[JournalEntry, journal.State]:
        """The recoverable checkpoint at journal seq ``seq`` and the state it holds
        (UsageError if that entry is not one; NotFound if the thread is missing)."""
        rows = await self.backend.journal.journal_rows(thread_id, seq - 1, 1)
        if rows is None:
            raise NotFound(f"no thread {thread_id!r}")
        head = rows[0] if rows and rows[0].seq == seq else None
        if head is None or head.kind not in ("full", "incremental") or not head.recoverable:
            raise UsageError(f"journal seq {seq} of thread {thread_id!r} is not a recoverable checkpoint")
        if head.kind == "full":
            return head, journal.decode_full(await self._body(head))
        return head, await self.state_at(thread_id, head.upto)
