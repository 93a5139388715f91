"""The store core: the public :class:`~dormant.store.base.Store`, written once over a
:class:`~dormant.store.backend.Backend`.

Every domain rule lives here, whatever the database: validation and size limits of
inputs, paging (page size, cursors), which summary a view starts from and the view
driver (:mod:`dormant.store.views`), plan checks, the view cache (one
:class:`~dormant.view.cache.ViewCache`, handed in or created here, reachable as
:attr:`StoreCore.views`), the byte cut of a slice's inputs, claim tokens, tenant
scope. The backend only moves rows.

Tenant scope: every thread, input and blob operation takes ``tenant`` (keyword; None,
the default, is the library's unscoped access). With a tenant, an id outside it is
NotFound before any row is read, a listing stops at the tenant's last thread, and a
slice's plan may write only into its own tenant (:mod:`dormant.tenants.scope`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import msgspec

from .. import inbox
from ..errors import InvalidInput, NotFound, StoreError, UsageError
from ..journal.rules import validate_changes, validate_state
from ..memory.registers import is_binding_key
from ..records import (
    MAX_CLIENT_TOOLS_BYTES,
    MAX_FINGERPRINT,
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
    Part,
    SliceLoad,
    StoreStatus,
    Summary,
    Thread,
    ViewLimits,
)
from ..tenants import scope as tenancy
from ..tools.blobs import read_length
from ..view.cache import ViewCache
from .backend import Backend
from .base import clamp_limit, seq_cursor
from .core_approvals import ApprovalRules
from .core_retention import RetentionRules
from .core_tenants import TenantRules
from .core_waits import MAX_WAIT_REASON as MAX_WAIT_REASON
from .core_waits import ModelWaits, cut_reason
from .journal import StateJournal
from .rows import MAX_ROW_STATE_BYTES, row_state
from .views import PendingCounts, ViewReads, load_view

if TYPE_CHECKING:
    from ..memory.backend import MemoryBackend
    from .health import Report

_log = logging.getLogger(__name__)

#: Appended to a tool result that retention cut (:meth:`StoreCore.shrink_tool_results`).

#: Default byte budget of the view cache when none is handed in.
DEFAULT_VIEW_CACHE_BYTES = 24 * 1024 * 1024
#: Disk for views evicted from RAM (:mod:`dormant.view.spill`).
DEFAULT_VIEW_SPILL_BYTES = 256 * 1024 * 1024


def result_input(
    thread_id: str, call_id: str, tool: str | None, content: str, is_error: bool, parts: tuple[Part, ...] = ()
) -> NewInput:
    """The ``tool_result`` input answering call ``call_id`` (dedup key: the call id, so
    the first answer wins), with the images and files (``parts``) the tool returned."""
    return NewInput(
        thread_id=thread_id,
        kind="tool_result",
        dedup_key=call_id,
        content=content,
        call_id=call_id,
        tool_name=tool,
        is_error=is_error,
        parts=parts,
    )


def tool_key(agent: str, tool: str) -> str:
    """How a backend matches an outbox call's ``(agent, tool)`` with a worker's tools:
    ``agent + "\x1f" + tool`` (no name holds a unit separator)."""
    return f"{agent}\x1f{tool}"


#: Stored before the dedup key of every input admitted from outside (:meth:`StoreCore.admit`
#: of a ``user`` or ``event`` input): those keys live in a namespace of their own, so a
#: user key can never equal a key the system makes (a call id for its result, ``timer:``,
#: ``spawn:``, ``report:`` ...). No key given to the store may start with it.
USER_KEY_PREFIX = "\x1fu:"
#: The input kinds whose keys :meth:`StoreCore.admit` puts in the user namespace.
USER_KINDS = frozenset({"user", "event"})


def user_namespace(items: Sequence[NewInput]) -> list[NewInput]:
    """``items`` as stored: user and event keys in the user namespace."""
    return [
        msgspec.structs.replace(item, dedup_key=USER_KEY_PREFIX + item.dedup_key)
        if item.kind in USER_KINDS
        else item
        for item in items
    ]


def shown(inputs: list[Input]) -> list[Input]:
    """Stored inputs as their admitter named them (the user namespace prefix removed)."""
    cut = len(USER_KEY_PREFIX)
    return [
        msgspec.structs.replace(item, dedup_key=item.dedup_key[cut:])
        if item.dedup_key.startswith(USER_KEY_PREFIX)
        else item
        for item in inputs
    ]


def validate(items: Sequence[NewInput], max_input_bytes: int) -> None:
    """:func:`dormant.inbox.validate`, no NUL character in any text of an input
    (PostgreSQL cannot store one, so no backend accepts one) and no key in the user
    namespace's form; InvalidInput otherwise."""
    inbox.validate(items, max_input_bytes)
    for item in items:
        if item.dedup_key.startswith(USER_KEY_PREFIX):
            raise InvalidInput(
                f"a dedup key may not start with {USER_KEY_PREFIX!r} (thread {item.thread_id!r})"
            )
        texts = (
            item.thread_id,
            item.dedup_key,
            item.content,
            item.source,
            item.call_id,
            item.tool_name,
            item.agent,
            item.tools,
        )
        if item.tools is not None and len(item.tools.encode()) > MAX_CLIENT_TOOLS_BYTES:
            raise InvalidInput(f"an input's client tools are at most {MAX_CLIENT_TOOLS_BYTES} bytes of JSON")
        if item.fingerprint is not None and not 0 < len(item.fingerprint) <= MAX_FINGERPRINT:
            raise InvalidInput(f"an input's fingerprint is 1 to {MAX_FINGERPRINT} characters (a hash)")
        if any(text and "\x00" in text for text in texts):
            raise InvalidInput(f"an input for thread {item.thread_id!r} contains a NUL character (\\x00)")


def cut_inputs(inputs: list[Input], max_bytes: int) -> list[Input]:
    """The first inputs whose text fits ``max_bytes`` together (always at least one)."""
    size = 0
    for n, item in enumerate(inputs):
        size += len(item.content)
        if n and size > max_bytes:
            return inputs[:n]
    return inputs


def check_plan(plan: CommitPlan) -> None:
    """StoreError unless the plan's messages are numbered one after another."""
    messages = plan.messages
    if any(m.seq != messages[0].seq + n for n, m in enumerate(messages)):
        raise StoreError(f"the messages of a plan of {plan.thread_id!r} are not numbered in order")


#: Seconds of a UTC day (the thread-day limit counts from its start).
DAY_S = 86400


class StoreCore(TenantRules, RetentionRules, ModelWaits, ApprovalRules):
    """The :class:`~dormant.store.base.Store` over one backend.

    ``views`` is the view cache (created from ``view_cache_bytes`` and
    ``view_spill_bytes`` when not handed in); the RSS governor reaches it as
    ``store.views``. ``view_reads`` counts what building views read (benchmarks).
    """

    def __init__(
        self,
        backend: Backend,
        *,
        views: ViewCache | None = None,
        view_cache_bytes: int = DEFAULT_VIEW_CACHE_BYTES,
        view_spill_bytes: int = DEFAULT_VIEW_SPILL_BYTES,
        max_input_bytes: int = inbox.DEFAULT_MAX_INPUT_BYTES,
    ) -> None:
        self.backend = backend
        self.url = backend.url
        self.views = views if views is not None else ViewCache(view_cache_bytes, spill_bytes=view_spill_bytes)
        self.max_input_bytes = max_input_bytes
        self.view_reads = ViewReads()
        #: token counts view loads made, written back with their thread's next commit
        self.pending_counts = PendingCounts()
        #: bytes read_blob returned so far (benchmarks)
        self.blob_read_bytes = 0
        #: the state journal: recovery, checkpoints, paged reads (change records come with plans)
        self.journal = StateJournal(backend)

    # -- lifecycle and abilities ---------------------------------------------------------

    async def open(self) -> None:
        """Create or migrate the schema and start the backend."""
        await self.backend.open()

    async def close(self) -> None:
        """Flush pending writes and release connections (and the views' spill file)."""
        try:
            await self.backend.close()
        finally:
            self.views.spill.close()

    @property
    def clock(self) -> Callable[[], float]:
        """The clock rows are stamped with."""
        return self.backend.clock

    @property
    def commits(self) -> int:
        """Transactions the backend committed (0 if it does not count them)."""
        return self.backend.commits

    @property
    def path(self) -> str | None:
        """The database file when the database is one local file, else None."""
        return self.backend.path

    @property
    def persistent(self) -> bool:
        """Whether the data outlives this process (False for ``memory://``)."""
        return self.backend.persistent

    def subscribe(self, callback: Callable[[str], None]) -> bool:
        """Wake-up hints from other processes; False when there are none (poll)."""
        return self.backend.subscribe(callback)

    async def exists(self) -> bool:
        """Whether the database exists already (opening would not create it)."""
        return await self.backend.exists()

    def diagnose(self, *, quick: bool, now: float, stuck_after_s: float) -> Report:
        """``dormant doctor`` for this database (UsageError if it has none)."""
        return self.backend.diagnose(quick=quick, now=now, stuck_after_s=stuck_after_s)

    async def release_caches(self) -> int:
        """Free the backend's in-process database caches (RSS pressure); how many
        connections gave RAM back. The view cache is the governor's to shrink."""
        return await self.backend.release_caches()

    async def release_memory(self) -> int:
        """The earlier name of :meth:`release_caches` (deprecated: "memory" now means
        long-term memory only)."""
        return await self.release_caches()

    def memory_rows(self) -> MemoryBackend:
        """Long-term memory's rows in this store (the backend's; the rules are
        :class:`~dormant.memory.core.MemoryCore`'s, put over them by the caller)."""
        return self.backend.memory_rows()

    # -- threads ---------------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, agent: str, *, tenant: str | None = None, state: Mapping[str, str] | None = None
    ) -> Thread:
        """Create a thread if it does not exist, with key/value ``state`` (JSON text
        values, e.g. its subject: :data:`dormant.memory.registers.SUBJECT_KEY`) journaled in the
        same transaction when it is new; the stored row either way."""
        tenancy.check([thread_id], tenant)
        if state:
            validate_state(state)
        return await self.backend.create_thread(thread_id, agent, state or None)

    async def get_thread(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """The thread's row; NotFound if missing."""
        tenancy.check([thread_id], tenant)
        thread = await self.backend.get_thread(thread_id)
        if thread is None:
            raise NotFound(f"no thread {thread_id!r}")
        return thread

    async def retry_thread(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """Make a failed thread active again."""
        tenancy.check([thread_id], tenant)
        thread = await self.backend.retry_thread(thread_id)
        if thread is None:
            raise NotFound(f"no thread {thread_id!r}")
        return thread

    async def delete_thread(self, thread_id: str, *, tenant: str | None = None) -> int:
        """Delete a thread, its descendants and what only they refer to."""
        tenancy.check([thread_id], tenant)
        tree = await self.backend.delete_threads(thread_id)
        for gone in tree:
            self.views.discard(gone)
        return len(tree)

    # -- admission and slices --------------------------------------------------------

    async def admit(self, items: Sequence[NewInput], *, tenant: str | None = None) -> list[Admission]:
        """Admit validated inputs durably, the batch in one transaction. The keys of
        ``user`` and ``event`` inputs live in the user namespace (:data:`USER_KEY_PREFIX`)."""
        tenancy.check((item.thread_id for item in items), tenant)
        validate(items, self.max_input_bytes)
        if not items:
            return []
        admitted = await self.backend.admit(user_namespace(items))
        return [
            a if a.dedup_key == item.dedup_key else msgspec.structs.replace(a, dedup_key=item.dedup_key)
            for a, item in zip(admitted, items, strict=True)
        ]

    async def claim_threads(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        agents: Collection[str] | None = None,
        tenant_slices: int = 0,
    ) -> list[Claim]:
        """Lease up to ``limit`` ready threads (one token for the batch), of ``agents`` only
        when given, fair across tenants, none of a tenant that holds ``tenant_slices``
        leases already (0: no cap)."""
        if limit <= 0:
            return []
        if tenant_slices < 0:
            raise UsageError(f"tenant_slices must be 0 (no cap) or positive, not {tenant_slices}")
        hosted = None if agents is None else sorted(set(agents))
        token = secrets.token_hex(8)
        return await self.backend.claim_threads(worker, limit, lease_s, token, hosted, tenant_slices)

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """The claimed thread's row, bounded view and ready inputs (cut by bytes)."""
        async with self.backend.reader() as reader:
            loaded = await reader.slice_rows(claim, limits.max_inputs, limits.max_input_bytes)
            if loaded is None:
                raise NotFound(f"no thread {claim.thread_id!r}")
            thread, inputs, state = loaded
            cached = self.views.lookup(thread, limits)
            if cached is None:
                view, summary, inherited, counts, usage = await load_view(
                    reader, thread, limits, self.view_reads
                )
                self.pending_counts.add(thread.id, counts)
                self.views.put(thread, limits, view, summary, inherited, usage)
            else:
                view, summary, inherited, usage = cached
        inputs = cut_inputs(shown(inputs), limits.max_input_bytes)
        return SliceLoad(
            thread=thread,
            view=view,
            inputs=tuple(inputs),
            summary=summary,
            inherited=inherited,
            usage=usage,
            state=row_state(state),
        )

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Check and apply a slice's plan; LeaseLost (nothing changed) if the lease is gone."""
        check_plan(plan)
        tenancy.check_plan_scope(plan)
        validate(plan.admissions, self.max_input_bytes)
        validate_changes(plan.state)
        if plan.runs < 0:
            raise UsageError("a plan cannot end a negative number of runs")
        if plan.state_json is not None and len(plan.state_json) > MAX_ROW_STATE_BYTES:
            raise UsageError(f"a thread row carries at most {MAX_ROW_STATE_BYTES} bytes of state")
        if plan.subject is not None and not is_binding_key(plan.subject):
            raise UsageError(f"the subject of {plan.thread_id!r} is not a binding key")
        if plan.memory is not None and plan.memory.tenant != tenancy.tenant_of(plan.thread_id):
            raise UsageError(f"the memory writes of {plan.thread_id!r} are not of its tenant")
        counts = self.pending_counts.take(plan.thread_id)
        try:
            if counts:
                # submitted together, so a group-committing backend writes both in one batch
                applied, stored = await asyncio.gather(
                    self.backend.apply_plan(plan), self.backend.store_counts(counts), return_exceptions=True
                )
                if isinstance(applied, BaseException):
                    raise applied
                if isinstance(stored, Exception):
                    # the counts are a cache of the stored text: losing them only means the
                    # next rebuild counts again; the slice's own commit succeeded
                    _log.warning("writing back %d token counts failed: %s", len(counts), stored)
            else:
                await self.backend.apply_plan(plan)
        except BaseException:
            self.views.discard(plan.thread_id)
            raise
        # a view never holds reasoning (see the backends' view reads)
        messages = tuple(
            m if m.reasoning is None else msgspec.structs.replace(m, reasoning=None) for m in plan.messages
        )
        self.views.advance(plan.thread_id, messages, summarized=plan.summary is not None)

    async def release(
        self,
        claim: Claim,
        *,
        retry_at: float = 0.0,
        error: str | None = None,
        fail: bool = False,
        wait: str | None = None,
    ) -> None:
        """Give a lease back without a commit (a ``wait`` reason cut to :data:`MAX_WAIT_REASON`)."""
        self.pending_counts.take(claim.thread_id)
        await self.backend.release(claim, retry_at=retry_at, error=error, fail=fail, wait=cut_reason(wait))

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend the leases still held."""
        return await self.backend.renew_leases(claims, lease_s) if claims else []

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        tools: Collection[tuple[str, str]] | None = None,
    ) -> list[OutboxEntry]:
        """Reconcile expired calls, then lease up to ``limit`` due ones (of the ``(agent,
        tool)`` pairs of ``tools`` only, when given)."""
        hosted = None if tools is None else sorted({tool_key(agent, tool) for agent, tool in tools})
        return await self.backend.claim_outbox(worker, max(0, limit), lease_s, secrets.token_hex(8), hosted)

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False, tenant: str | None = None
    ) -> Admission:
        """Answer an open call from outside the dispatcher (first answer wins)."""
        tenancy.check([thread_id], tenant)
        item = result_input(thread_id, call_id, None, content, is_error)
        validate([item], self.max_input_bytes)
        return await self.backend.complete_call(item)

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record dispatcher outcomes; done/dead admit the result with them."""
        for outcome in outcomes:
            if len(outcome.content.encode()) > self.max_input_bytes:
                raise UsageError("tool result exceeds the input size limit; truncate it first")
            if outcome.parts and outcome.kind != "done":
                raise UsageError(f"a {outcome.kind!r} outcome carries no parts (only a done one does)")
        return await self.backend.finish_outbox(outcomes) if outcomes else []

    # -- paged reads -----------------------------------------------------------------

    async def history(
        self,
        thread_id: str,
        *,
        cursor: str | None = None,
        limit: int = 50,
        newest_first: bool = False,
        max_bytes: int | None = None,
        tenant: str | None = None,
    ) -> Page[Message]:
        """One page of a thread's messages; the cursor is the last seq seen. With
        ``max_bytes``, the page also holds at most that many bytes of message content
        and reasoning (UTF-8), but always one message: a bound on what one page costs
        to hold."""
        tenancy.check([thread_id], tenant)
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=2**62 if newest_first else 0)
        if max_bytes is not None and max_bytes < 1:
            raise UsageError(f"max_bytes must be positive, not {max_bytes}")
        rows = await self.backend.history_rows(thread_id, after, limit + 1, newest_first, max_bytes)
        if rows is None:
            raise NotFound(f"no thread {thread_id!r}")
        keep = min(limit, len(rows))
        if max_bytes is not None:
            total = 0
            for index, message in enumerate(rows[:keep]):
                total += len(message.content.encode()) + len((message.reasoning or "").encode())
                if total > max_bytes and index > 0:
                    keep = index
                    break
        items = tuple(rows[:keep])
        return Page(items=items, next_cursor=str(items[-1].seq) if len(rows) > keep and items else None)

    async def list_threads(
        self, *, cursor: str | None = None, limit: int = 50, tenant: str | None = None
    ) -> Page[Thread]:
        """One page of threads by id (with ``tenant``, of that tenant only, children
        included; its cursor must be one of its ids)."""
        limit = clamp_limit(limit)
        rows = tenancy.own_rows(
            await self.backend.thread_rows(tenancy.list_after(tenant, cursor), limit + 1), tenant
        )
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=items[-1].id if len(rows) > limit and items else None)

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries by id."""
        limit = clamp_limit(limit)
        after = seq_cursor(cursor, default=0)
        rows = await self.backend.outbox_rows(status, after, limit + 1)
        items = tuple(rows[:limit])
        return Page(items=items, next_cursor=str(items[-1].id) if len(rows) > limit and items else None)

    async def latest_summary(self, thread_id: str, *, tenant: str | None = None) -> Summary | None:
        """The thread's newest compaction summary (the one its views start with), None if
        it was never compacted; NotFound for a missing thread or one outside ``tenant``."""
        thread = await self.get_thread(thread_id, tenant=tenant)
        if not thread.summary_seq:
            return None
        async with self.backend.reader() as reader:
            return await reader.summary_at(thread.id, thread.summary_seq)

    async def resolve_call(self, entry_id: int, *, tenant: str | None = None) -> OutboxEntry:
        """Remove a dead-lettered or outcome-unknown call from the outbox once someone has
        dealt with it (its result is already in its thread); NotFound for a missing entry,
        one in another status, or one of another tenant's threads."""
        rows = await self.backend.outbox_rows(None, entry_id - 1, 1)
        if not rows or rows[0].id != entry_id or rows[0].status not in ("dead", "unknown"):
            raise NotFound(f"no dead-lettered or unknown call {entry_id}")
        tenancy.check([rows[0].thread_id], tenant)
        entry = await self.backend.resolve_call(entry_id)
        if entry is None:
            raise NotFound(f"no dead-lettered or unknown call {entry_id}")
        return entry

    async def has_work(self, agents: Sequence[str] | None = None) -> bool:
        """Ready input (in threads of ``agents``, when given), a leased thread or an open call."""
        return await self.backend.has_work(None if agents is None else sorted(agents))

    async def status(self, tenant: str | None = None) -> StoreStatus:
        """Counts and sizes for ``dormant status``; with ``tenant``, only that tenant's
        counts (its threads and their children, inputs, calls and messages; no sizes)."""
        if tenant is None:
            return await self.backend.status()
        return await self.backend.tenant_status(tenant)

    # -- retention -------------------------------------------------------------------

    async def fork_thread(self, source: str, new_id: str, at_seq: int, state: Mapping[str, str]) -> Thread:
        """A new thread branching from ``source`` after its message ``at_seq`` (its views
        read ``source``'s history up to there, which stays as it is), with key/value
        ``state`` (JSON text values) journaled; one transaction. NotFound if ``source`` is
        missing, UsageError if ``new_id`` exists or ``at_seq`` is not in 0..last_seq,
        InvalidInput for a bad id or state."""
        thread = await self.get_thread(source)
        if not 0 <= at_seq <= thread.last_seq:
            raise UsageError(f"at_seq must be in 0..{thread.last_seq}, not {at_seq}")
        if not new_id or len(new_id.encode()) > inbox.MAX_THREAD_ID_BYTES:
            raise InvalidInput(f"thread id must be 1..{inbox.MAX_THREAD_ID_BYTES} bytes")
        validate_state(state)
        return await self.backend.retention.fork_thread(source, new_id, at_seq, state)

    # -- blobs -----------------------------------------------------------------------

    async def put_blob(
        self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes], *, tenant: str | None = None
    ) -> BlobRef:
        """Store ``chunks`` as one blob that ``thread_id`` refers to."""
        tenancy.check([thread_id], tenant)
        return await self.backend.blobs.put_blob(thread_id, chunks)

    async def part_bytes_today(self, thread_id: str, *, tenant: str | None = None) -> int:
        """Bytes of the parts the thread took since the UTC day began (by the store's clock)."""
        tenancy.check([thread_id], tenant)
        now = self.backend.clock()
        return await self.backend.blobs.part_bytes_since(thread_id, now - now % DAY_S)

    async def get_blob(self, thread_id: str, ref: str, *, tenant: str | None = None) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or an ancestor refers to it."""
        tenancy.check([thread_id], tenant)
        size = await self.backend.blobs.blob_size(thread_id, ref)
        if size is None:
            raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")
        return BlobRef(ref=ref, size=size)

    async def read_blob(
        self, thread_id: str, ref: str, offset: int = 0, length: int = 65536, *, tenant: str | None = None
    ) -> bytes:
        """A byte range of a blob ``thread_id`` may see."""
        tenancy.check([thread_id], tenant)
        length = read_length(offset, length)
        data = await self.backend.blobs.read_blob(thread_id, ref, offset, length)
        if data is None:
            raise NotFound(f"thread {thread_id!r} has no blob {ref!r}")
        self.blob_read_bytes += len(data)
        return data

    async def sweep_blobs(self) -> int:
        """Remove what blob writes that never finished left (an hour old); chunks removed."""
        return await self.backend.blobs.sweep_blobs()
