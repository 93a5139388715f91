"""The in-memory store: every history kept in Python objects.

It exists as the baseline that benchmarks compare against (it is what runtimes
with in-memory sessions do: RAM grows with every agent and every turn) and it
passes the same contract suite as the durable backends. Nothing survives the
process. Each operation runs to completion on the event loop without awaiting,
so it is atomic; batches are checked before anything is changed.
"""

from __future__ import annotations

import heapq
import secrets
import time
from collections.abc import AsyncIterable, Callable, Iterable, Sequence
from dataclasses import dataclass, field

import msgspec

from .. import inbox
from ..blobs import CHUNK_BYTES, Chunker, chunk_span, read_length
from ..context import build_view
from ..errors import InvalidInput, LeaseLost, NotFound, StoreError, UsageError
from ..records import (
    Admission,
    BlobRef,
    Claim,
    CommitPlan,
    Input,
    Message,
    NewInput,
    OutboxEntry,
    OutboxOutcome,
    Page,
    SliceLoad,
    StoreStatus,
    Summary,
    Thread,
    ViewLimits,
)
from .base import clamp_limit, seq_cursor


@dataclass(slots=True)
class _ThreadRow:
    thread: Thread
    lease_token: str | None = None
    lease_expires: float = 0.0
    pending: list[int] = field(default_factory=list)  # input ids, admission order


@dataclass(slots=True)
class _CallRow:
    entry: OutboxEntry
    available_at: float
    lease_expires: float = 0.0


class MemoryStore:
    """A :class:`~dormant.store.base.Store` in RAM. ``memory://`` selects it."""

    def __init__(
        self,
        url: str = "memory://",
        *,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = url
        self.max_input_bytes = max_input_bytes
        self.clock = clock
        self._threads: dict[str, _ThreadRow] = {}
        self._inputs: dict[int, tuple[Input, float]] = {}  # id -> (input, sort key)
        self._dedup: dict[tuple[str, str], int] = {}
        self._consumed: set[int] = set()
        self._messages: dict[str, list[Message]] = {}
        self._summaries: dict[str, list[Summary]] = {}
        self._outbox: dict[int, _CallRow] = {}
        self._call_ids: set[tuple[str, str]] = set()
        self._open_calls: set[int] = set()
        self._next_input = 1
        self._next_call = 1
        self._is_open = False
        self._blobs: dict[str, tuple[int, list[bytes]]] = {}  # ref -> (size, chunks)
        self._blob_refs: dict[str, set[str]] = {}  # thread -> refs
        self._blob_users: dict[str, set[str]] = {}  # ref -> threads
        self.blob_read_bytes = 0

    async def open(self) -> None:
        """Nothing to create."""
        self._is_open = True

    async def close(self) -> None:
        """Nothing to flush."""
        self._is_open = False

    def _row(self, thread_id: str) -> _ThreadRow:
        row = self._threads.get(thread_id)
        if row is None:
            raise NotFound(f"no thread {thread_id!r}")
        return row

    def _new_thread(self, thread: Thread) -> None:
        self._threads[thread.id] = _ThreadRow(thread=thread)
        self._messages[thread.id] = []

    async def create_thread(self, thread_id: str, agent: str) -> Thread:
        """Create a thread if missing; return it."""
        if thread_id not in self._threads:
            now = self.clock()
            self._new_thread(Thread(id=thread_id, agent=agent, created_at=now, updated_at=now))
        return self._threads[thread_id].thread

    async def get_thread(self, thread_id: str) -> Thread:
        """The thread's row."""
        return self._row(thread_id).thread

    async def retry_thread(self, thread_id: str) -> Thread:
        """Reactivate a failed thread."""
        row = self._row(thread_id)
        row.thread = msgspec.structs.replace(
            row.thread, status="active", failures=0, error=None, updated_at=self.clock()
        )
        row.lease_expires = 0.0
        return row.thread

    # -- admission -------------------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Admit inputs; all or nothing."""
        inbox.validate(items, self.max_input_bytes)
        created: set[str] = set()  # an earlier item of the batch may create the thread
        for item in items:
            if item.thread_id not in self._threads and item.thread_id not in created:
                if not item.agent:
                    raise NotFound(f"no thread {item.thread_id!r} (pass an agent to create it)")
                created.add(item.thread_id)
        now = self.clock()
        return [self._admit_one(item, now) for item in items]

    def _admit_one(self, item: NewInput, now: float) -> Admission:
        if item.thread_id not in self._threads:
            if not item.agent:
                raise NotFound(f"no thread {item.thread_id!r}")
            self._new_thread(Thread(id=item.thread_id, agent=item.agent, created_at=now, updated_at=now))
        existing = self._dedup.get((item.thread_id, item.dedup_key))
        if existing is not None:
            return Admission(
                input_id=existing,
                thread_id=item.thread_id,
                dedup_key=item.dedup_key,
                duplicate=True,
            )
        input_id = self._next_input
        self._next_input += 1
        stored = Input(
            id=input_id,
            thread_id=item.thread_id,
            kind=item.kind,
            dedup_key=item.dedup_key,
            content=item.content,
            priority=item.priority,
            not_before=item.not_before,
            admitted_at=now,
            call_id=item.call_id,
            tool_name=item.tool_name,
            is_error=item.is_error,
            source=item.source,
        )
        self._inputs[input_id] = (stored, inbox.sort_key(item, now))
        self._dedup[(item.thread_id, item.dedup_key)] = input_id
        self._threads[item.thread_id].pending.append(input_id)
        return Admission(
            input_id=input_id, thread_id=item.thread_id, dedup_key=item.dedup_key, duplicate=False
        )

    # -- scheduling ------------------------------------------------------------------

    def _ready(self, row: _ThreadRow) -> tuple[float, float] | None:
        """(sort key, earliest not_before) of consumable pending inputs, or None."""
        if row.thread.status != "active":
            return None
        key = at = None
        for input_id in row.pending:
            item, k = self._inputs[input_id]
            if not inbox.consumable(item.kind, row.thread.awaiting):
                continue
            key = k if key is None else min(key, k)
            at = item.not_before if at is None else min(at, item.not_before)
        return None if key is None or at is None else (key, at)

    async def claim_threads(self, worker: str, limit: int, lease_s: float) -> list[Claim]:
        """Lease up to ``limit`` ready threads, best key first."""
        if limit <= 0:
            return []
        now = self.clock()
        candidates = []
        for row in self._threads.values():
            if not row.pending or row.lease_expires > now:
                continue
            ready = self._ready(row)
            if ready is not None and ready[1] <= now:
                candidates.append((ready[0], row.thread.id))
        claims = []
        for _, thread_id in heapq.nsmallest(limit, candidates):
            row = self._threads[thread_id]
            row.lease_token = secrets.token_hex(8)
            row.lease_expires = now + lease_s
            claims.append(
                Claim(
                    thread_id=thread_id,
                    token=row.lease_token,
                    expires_at=row.lease_expires,
                    agent=row.thread.agent,
                )
            )
        return claims

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """Thread row, bounded view and ready inputs."""
        row = self._row(claim.thread_id)
        now = self.clock()
        inputs: list[Input] = []
        size = 0
        for input_id in row.pending:
            item = self._inputs[input_id][0]
            if item.not_before > now or not inbox.consumable(item.kind, row.thread.awaiting):
                continue
            size += len(item.content)
            if len(inputs) >= limits.max_inputs or (inputs and size > limits.max_input_bytes):
                break
            inputs.append(item)

        def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
            history = self._messages[thread_id]
            return history[max(min_seq, max_seq - limit) : max_seq][::-1]

        summary = self._summary_for(row.thread)
        view, inherited = build_view(row.thread, limits, fetch, self._parent_of, summary)
        return SliceLoad(
            thread=row.thread, view=view, inputs=tuple(inputs), summary=summary, inherited=inherited
        )

    def _parent_of(self, thread_id: str) -> tuple[str, int] | None:
        t = self._threads[thread_id].thread
        return (t.parent_id, t.parent_seq) if t.parent_id else None

    def _summary_for(self, thread: Thread) -> Summary | None:
        """The thread's latest summary, else the one its nearest ancestor had at the spawn."""
        if thread.summary_seq:
            return self._summaries[thread.id][-1]
        link = self._parent_of(thread.id)
        while link is not None:
            parent_id, parent_seq = link
            for summary in reversed(self._summaries.get(parent_id, ())):
                if summary.made_at_seq <= parent_seq:
                    return summary
            link = self._parent_of(parent_id)
        return None

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a plan; checks first, then changes, so it is all or nothing."""
        row = self._row(plan.thread_id)
        if row.lease_token != plan.token:
            raise LeaseLost(f"lease on thread {plan.thread_id!r} was lost before commit")
        inbox.validate(plan.admissions, self.max_input_bytes)
        if len(set(plan.consumed)) != len(plan.consumed):
            raise StoreError(f"a plan of {plan.thread_id!r} consumes an input twice")
        for input_id in plan.consumed:
            if input_id not in row.pending:
                raise StoreError(f"input {input_id} of {plan.thread_id!r} is not pending")
        summary = plan.summary
        if summary is not None and not row.thread.summary_seq < summary.upto_seq <= row.thread.last_seq:
            raise StoreError(
                f"the plan of {plan.thread_id!r} does not fit its stored state (its summary does not "
                "move forward over stored messages)"
            )
        expected = row.thread.last_seq + 1
        for message in plan.messages:
            if message.seq != expected:
                raise StoreError(f"message seq {message.seq} breaks the order of {plan.thread_id!r}")
            expected += 1
        created: set[str] = set()
        for child in plan.threads:
            if child.id in self._threads or child.id in created:
                raise StoreError(f"thread {child.id!r} already exists")
            created.add(child.id)
        if len({c.call_id for c in plan.calls}) != len(plan.calls):
            raise StoreError(f"a plan of {plan.thread_id!r} has two calls with one id")
        for call in plan.calls:
            if (plan.thread_id, call.call_id) in self._call_ids:
                raise StoreError(f"call {call.call_id!r} is already in the outbox")
        for item in plan.admissions:
            if item.thread_id not in self._threads and item.thread_id not in created:
                if not item.agent:
                    raise NotFound(f"no thread {item.thread_id!r}")
                created.add(item.thread_id)
        now = self.clock()
        consumed = set(plan.consumed)
        row.pending = [i for i in row.pending if i not in consumed]
        self._consumed |= consumed
        self._messages[plan.thread_id].extend(
            msgspec.structs.replace(m, created_at=m.created_at or now) for m in plan.messages
        )
        for call in plan.calls:
            entry = OutboxEntry(
                id=self._next_call,
                thread_id=plan.thread_id,
                agent=row.thread.agent,
                call_id=call.call_id,
                tool=call.tool,
                arguments=call.arguments,
                status="pending",
                attempts=0,
                idempotent=call.idempotent,
                created_at=now,
            )
            self._outbox[entry.id] = _CallRow(entry=entry, available_at=now)
            self._open_calls.add(entry.id)
            self._call_ids.add((plan.thread_id, call.call_id))
            self._next_call += 1
        for child in plan.threads:
            self._new_thread(
                Thread(
                    id=child.id,
                    agent=child.agent,
                    parent_id=child.parent_id,
                    parent_seq=child.parent_seq,
                    created_at=now,
                    updated_at=now,
                )
            )
        last_seq = plan.messages[-1].seq if plan.messages else row.thread.last_seq
        if summary is not None:
            self._summaries.setdefault(plan.thread_id, []).append(
                msgspec.structs.replace(
                    summary, thread_id=plan.thread_id, created_at=summary.created_at or now
                )
            )
        row.thread = msgspec.structs.replace(
            row.thread,
            last_seq=last_seq,
            tokens=row.thread.tokens + sum(m.tokens for m in plan.messages),
            summary_seq=summary.upto_seq if summary else row.thread.summary_seq,
            summarized_tokens=summary.covered_tokens if summary else row.thread.summarized_tokens,
            awaiting=plan.awaiting,
            failures=0,
            error=None,
            updated_at=now,
        )
        row.lease_token = None
        row.lease_expires = 0.0
        for item in plan.admissions:
            self._admit_one(item, now)

    async def release(
        self, claim: Claim, *, retry_at: float = 0.0, error: str | None = None, fail: bool = False
    ) -> None:
        """Give a lease back without committing."""
        row = self._row(claim.thread_id)
        if row.lease_token != claim.token:
            return
        row.lease_token = None
        row.lease_expires = retry_at
        row.thread = msgspec.structs.replace(
            row.thread,
            failures=row.thread.failures + (1 if error else 0),
            error=error or row.thread.error,
            status="failed" if fail else row.thread.status,
            updated_at=self.clock(),
        )

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend held leases."""
        expires = self.clock() + lease_s
        kept = []
        for claim in claims:
            row = self._threads.get(claim.thread_id)
            if row is not None and row.lease_token == claim.token:
                row.lease_expires = expires
                kept.append(msgspec.structs.replace(claim, expires_at=expires))
        return kept

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(self, worker: str, limit: int, lease_s: float) -> list[OutboxEntry]:
        """Reconcile expired running entries, then lease due pending ones."""
        now = self.clock()
        for entry_id in sorted(self._open_calls):
            call = self._outbox[entry_id]
            if call.entry.status != "running" or call.lease_expires > now:
                continue
            if call.entry.idempotent:
                call.entry = msgspec.structs.replace(call.entry, status="pending", token=None)
                call.available_at = now
            else:
                call.entry = msgspec.structs.replace(
                    call.entry,
                    status="unknown",
                    token=None,
                    last_error="lease expired while running",
                )
                self._open_calls.discard(entry_id)
                self._admit_result(call.entry, inbox.UNKNOWN_OUTCOME, True, now)
        due = sorted(
            (c.available_at, i)
            for i in self._open_calls
            if (c := self._outbox[i]).entry.status == "pending" and c.available_at <= now
        )
        claimed = []
        for _, entry_id in due[: max(0, limit)]:
            call = self._outbox[entry_id]
            call.entry = msgspec.structs.replace(
                call.entry,
                status="running",
                attempts=call.entry.attempts + 1,
                token=secrets.token_hex(8),
            )
            call.lease_expires = now + lease_s
            claimed.append(call.entry)
        return claimed

    def _admit_result(self, entry: OutboxEntry, content: str, is_error: bool, now: float) -> None:
        self._admit_one(
            NewInput(
                thread_id=entry.thread_id,
                kind="tool_result",
                dedup_key=entry.call_id,
                content=content,
                call_id=entry.call_id,
                tool_name=entry.tool,
                is_error=is_error,
            ),
            now,
        )

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False
    ) -> Admission:
        """Answer an open call from outside; see :meth:`Store.complete_call`."""
        inbox.validate(
            [
                NewInput(
                    thread_id=thread_id,
                    kind="tool_result",
                    dedup_key=call_id,
                    content=content,
                    call_id=call_id,
                )
            ],
            self.max_input_bytes,
        )
        known = self._dedup.get((thread_id, call_id))
        if known is not None:
            return Admission(input_id=known, thread_id=thread_id, dedup_key=call_id, duplicate=True)
        entry_id = next(
            (
                i
                for i in self._open_calls
                if self._outbox[i].entry.thread_id == thread_id and self._outbox[i].entry.call_id == call_id
            ),
            None,
        )
        if entry_id is None:
            raise NotFound(f"thread {thread_id!r} has no open call {call_id!r}")
        entry = self._outbox.pop(entry_id).entry
        self._open_calls.discard(entry_id)
        self._call_ids.discard((thread_id, call_id))
        self._admit_result(entry, content, is_error, self.clock())
        return Admission(
            input_id=self._dedup[(thread_id, call_id)],
            thread_id=thread_id,
            dedup_key=call_id,
            duplicate=False,
        )

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes; done/dead admit the tool result."""
        for outcome in outcomes:
            if len(outcome.content.encode()) > self.max_input_bytes:
                raise UsageError("tool result exceeds the input size limit; truncate it first")
        now = self.clock()
        held = []
        for o in outcomes:
            call = self._outbox.get(o.entry_id)
            if call is None or call.entry.status != "running" or call.entry.token != o.token:
                held.append(False)
                continue
            held.append(True)
            if o.kind == "retry":
                call.entry = msgspec.structs.replace(
                    call.entry, status="pending", token=None, last_error=o.error
                )
                call.available_at = o.retry_at
                call.lease_expires = 0.0
                continue
            self._open_calls.discard(o.entry_id)
            self._admit_result(call.entry, o.content, o.is_error, now)
            if o.kind == "done":  # completed calls leave the outbox; dead ones stay visible
                del self._outbox[o.entry_id]
                self._call_ids.discard((call.entry.thread_id, call.entry.call_id))
            else:
                call.entry = msgspec.structs.replace(
                    call.entry, status="dead", token=None, last_error=o.error
                )
        return held

    # -- reads -----------------------------------------------------------------------

    async def history(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
    ) -> Page[Message]:
        """One page of a thread's messages."""
        self._row(thread_id)
        limit = clamp_limit(limit)
        messages = self._messages[thread_id]
        if newest_first:
            before = max(1, min(seq_cursor(cursor, default=len(messages) + 1), len(messages) + 1))
            start = max(0, before - 1 - limit)
            items = tuple(messages[start : before - 1][::-1])
            more = start > 0
        else:
            after = max(0, seq_cursor(cursor, default=0))
            items = tuple(messages[after : after + limit])
            more = after + limit < len(messages)
        return Page(items=items, next_cursor=str(items[-1].seq) if more and items else None)

    async def list_threads(self, *, cursor: str | None = None, limit: int = 50) -> Page[Thread]:
        """One page of threads by id."""
        limit = clamp_limit(limit)
        after = cursor or ""
        ids = heapq.nsmallest(limit + 1, (i for i in self._threads if i > after))
        items = tuple(self._threads[i].thread for i in ids[:limit])
        return Page(items=items, next_cursor=items[-1].id if len(ids) > limit and items else None)

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries by id."""
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=0)
        ids = heapq.nsmallest(
            limit + 1,
            (
                i
                for i, c in self._outbox.items()
                if i > after and (status is None or c.entry.status == status)
            ),
        )
        items = tuple(self._outbox[i].entry for i in ids[:limit])
        return Page(items=items, next_cursor=str(items[-1].id) if len(ids) > limit and items else None)

    async def has_work(self) -> bool:
        """Ready input, a leased thread, or an open outbox entry."""
        if self._open_calls:
            return True
        now = self.clock()
        for row in self._threads.values():
            if row.lease_token is not None:
                return True
            if row.pending:
                ready = self._ready(row)
                if ready is not None and ready[1] <= now:
                    return True
        return False

    async def status(self) -> StoreStatus:
        """Counts for ``dormant status``."""
        now = self.clock()
        by_status: dict[str, int] = {}
        ready = leased = 0
        for row in self._threads.values():
            by_status[row.thread.status] = by_status.get(row.thread.status, 0) + 1
            leased += row.lease_token is not None
            r = self._ready(row) if row.pending else None
            ready += r is not None and r[1] <= now
        backlog: dict[str, int] = {}
        for row in self._threads.values():
            for input_id in row.pending:
                key = f"P{int(self._inputs[input_id][0].priority)}"
                backlog[key] = backlog.get(key, 0) + 1
        outbox: dict[str, int] = {}
        for call in self._outbox.values():
            outbox[call.entry.status] = outbox.get(call.entry.status, 0) + 1
        return StoreStatus(
            threads_by_status=by_status,
            threads_ready=ready,
            threads_leased=leased,
            backlog_by_priority=backlog,
            outbox_by_status=outbox,
            dead_letters=outbox.get("dead", 0),
            messages=sum(len(m) for m in self._messages.values()),
        )

    # -- deletion and blobs ------------------------------------------------------------

    async def delete_thread(self, thread_id: str) -> int:
        """Delete a thread, its descendants, their rows and the blobs left unreferenced."""
        self._row(thread_id)
        children: dict[str, list[str]] = {}
        for row in self._threads.values():
            if row.thread.parent_id is not None:
                children.setdefault(row.thread.parent_id, []).append(row.thread.id)
        tree = [thread_id]
        for tid in tree:  # grows while walked: breadth first
            tree.extend(children.get(tid, ()))
        now = self.clock()
        leased = [
            t
            for t in tree
            if self._threads[t].lease_token is not None and self._threads[t].lease_expires > now
        ]
        if leased:
            raise InvalidInput(f"thread {leased[0]!r} is running a slice; delete it once the slice ends")
        gone = set(tree)
        for tid in tree:
            self._threads.pop(tid)
            self._messages.pop(tid, None)
            self._summaries.pop(tid, None)
            for ref in self._blob_refs.pop(tid, set()):
                users = self._blob_users[ref]
                users.discard(tid)
                if not users:
                    del self._blob_users[ref]
                    del self._blobs[ref]
        for input_id in [i for i, (item, _) in self._inputs.items() if item.thread_id in gone]:
            del self._inputs[input_id]
            self._consumed.discard(input_id)
        for key in [k for k in self._dedup if k[0] in gone]:
            del self._dedup[key]
        for entry_id in [i for i, c in self._outbox.items() if c.entry.thread_id in gone]:
            entry = self._outbox.pop(entry_id).entry
            self._open_calls.discard(entry_id)
            self._call_ids.discard((entry.thread_id, entry.call_id))
        return len(tree)

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob (by content) that ``thread_id`` refers to."""
        self._row(thread_id)
        chunker = Chunker()
        stored: list[bytes] = []
        async for batch in chunker.batches(chunks):
            stored.extend(chunk for _, chunk in batch)
        self._row(thread_id)  # deleted while the pieces came in?
        blob = chunker.blob
        if blob.ref not in self._blobs:
            self._blobs[blob.ref] = (blob.size, stored)
        self._blob_refs.setdefault(thread_id, set()).add(blob.ref)
        self._blob_users.setdefault(blob.ref, set()).add(thread_id)
        return blob

    def _visible_blob(self, thread_id: str, ref: str) -> tuple[int, list[bytes]]:
        self._row(thread_id)
        lineage: str | None = thread_id
        while lineage is not None:
            if ref in self._blob_refs.get(lineage, ()):
                return self._blobs[ref]
            lineage = self._threads[lineage].thread.parent_id
        raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or an ancestor refers to it."""
        size, _ = self._visible_blob(thread_id, ref)
        return BlobRef(ref=ref, size=size)

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """A byte range of a blob ``thread_id`` may see."""
        length = read_length(offset, length)
        size, stored = self._visible_blob(thread_id, ref)
        parts = []
        for idx in chunk_span(offset, length, size, CHUNK_BYTES):
            start = idx * CHUNK_BYTES
            parts.append(stored[idx][max(0, offset - start) : offset + length - start])
        data = b"".join(parts)
        self.blob_read_bytes += len(data)
        return data
