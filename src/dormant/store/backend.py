"""The backend protocol: the row operations a database supplies to the store core.

:class:`~dormant.store.core.StoreCore` implements the public
:class:`~dormant.store.base.Store` protocol once and owns every domain rule:
input validation and size limits, paging (page size, cursors, ``next_cursor``),
which summary a view starts from, plan checks, the view cache, the input byte cut
of a slice, claim tokens. A backend only moves rows: one method per domain
operation, each in ONE transaction of its own (unless said otherwise), answering
only once that transaction is durable. A backend never re-implements a rule of the
core, and the core never branches on which backend it drives.

Errors: every method raises :class:`~dormant.errors.StoreError` (or a subclass:
``StoreFull``, ``StoreLocked``, ``SchemaError``) when the database fails, translated
from the driver's own exceptions; a failed write changes nothing. ``NotFound`` and
``LeaseLost`` are raised where documented below; a backend never turns a storage
error into success.

Times: a backend reads the clock it was given (``clock``) itself, at the moment
its transaction runs (a group-committing writer may run a job later than it was
queued); values the core decides (tokens, lease lengths) are passed in.

Optional abilities have a place here too, with the fallback a backend inherits
from :class:`BackendDefaults` (so no caller probes with ``getattr``):
:meth:`Backend.subscribe` (wake-up hints; fallback: none, callers poll),
:meth:`Backend.exists` (fallback: True), :attr:`Backend.commits` (fallback: 0),
:attr:`Backend.path` (fallback: None), :attr:`Backend.persistent` (fallback: True),
:meth:`Backend.diagnose` (fallback: UsageError, no doctor for this backend),
:meth:`Backend.release_caches` (fallback: 0, nothing held in this process).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

from ..errors import UsageError
from ..records import (
    Admission,
    Claim,
    CommitPlan,
    Input,
    Message,
    NewInput,
    OutboxEntry,
    OutboxOutcome,
    StoreStatus,
    Summary,
    Thread,
)
from .parts import ApprovalRows, BlobRows, JournalRows, RetentionRows, TenantRows

if TYPE_CHECKING:
    from ..memory.backend import MemoryBackend
    from .health import Report


class SliceReader(Protocol):
    """The reads of one slice load, on one connection (one consistent view of
    committed state while the claim's lease is held).

    The core's view driver (:func:`dormant.store.views.load_view`) asks for what
    :func:`~dormant.view.builder.build_view` needs; nothing here applies a rule.
    """

    async def slice_rows(
        self, claim: Claim, max_inputs: int, max_bytes: int
    ) -> tuple[Thread, list[Input], str | None] | None:
        """The claimed thread's row, its ``state`` column (JSON text, None: not carried)
        and its ready inputs, admission order, at most
        ``max_inputs`` of them (ready: ``not_before <= now`` and, while the thread awaits
        results, only ``tool_result`` inputs). None if the thread does not exist.

        The fetch is bounded by bytes too: it reads no input past the first whose text
        brings the total over ``max_bytes`` (the first input is always read), so a slice
        never pulls ``max_inputs`` huge inputs to keep one. The core still cuts by bytes.

        A backend may load the rows of a whole claim batch at once (SQLite does) as
        long as what it answers is true for the claim's lease, and bounded in bytes.
        """
        ...

    async def newest_messages(self, thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        """At most ``limit`` messages of ``thread_id`` with ``min_seq < seq <= max_seq``,
        newest first."""
        ...

    async def parent_link(self, thread_id: str) -> tuple[str, int] | None:
        """``(parent_id, parent_seq)`` of a thread, None for a root (or a missing thread)."""
        ...

    async def summary_at(self, thread_id: str, upto_seq: int) -> Summary | None:
        """The thread's summary that covers up to ``upto_seq``, None if none."""
        ...

    async def summary_inherited(self, thread_id: str, parent_seq: int) -> Summary | None:
        """The newest summary of ``thread_id`` made at or before its message
        ``parent_seq`` (what a child spawned there inherits), None if none."""
        ...


class Backend(Protocol):
    """Row operations and transaction/claim primitives of one database."""

    url: str
    #: the clock the backend stamps rows with (seconds since the epoch)
    clock: Callable[[], float]

    # -- the narrow parts (:mod:`dormant.store.parts`) ---------------------------------

    @property
    def journal(self) -> JournalRows:
        """The state journal's rows."""
        ...

    @property
    def retention(self) -> RetentionRows:
        """What the retention tiers prune, and their sizes."""
        ...

    @property
    def blobs(self) -> BlobRows:
        """Large tool outputs by content."""
        ...

    @property
    def tenants(self) -> TenantRows:
        """Tenants and API keys."""
        ...

    @property
    def approvals(self) -> ApprovalRows:
        """Waits for a person: approvals and questions."""
        ...

    # -- lifecycle -------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, create or migrate the schema (through :mod:`dormant.store.migrations`),
        start writers. SchemaError for a newer schema or a damaged database. Idempotent."""
        ...

    async def close(self) -> None:
        """Let queued writes finish and release connections. Idempotent."""
        ...

    def reader(self) -> AbstractAsyncContextManager[SliceReader]:
        """A :class:`SliceReader` for one slice load (a pooled connection, say)."""
        ...

    # -- threads ---------------------------------------------------------------------

    async def create_thread(
        self, thread_id: str, agent: str, state: Mapping[str, str] | None = None
    ) -> Thread:
        """Insert the thread row unless it exists, with key/value ``state`` (JSON text
        values) journaled as ``add`` records in the same transaction when it is new; the
        stored row either way (an existing thread's state is left as it is)."""
        ...

    async def get_thread(self, thread_id: str) -> Thread | None:
        """The thread's row, None if missing (API read connection)."""
        ...

    async def wake_waiting(self, endpoint: str) -> int:
        """Threads not leased whose ``wait_reason`` contains ``endpoint``: claimable now
        (``lease_expires`` and ``wait_until`` set to now, the reason kept); how many."""
        ...

    async def retry_thread(self, thread_id: str) -> Thread | None:
        """Status ``active``, failures 0, error cleared, readiness recomputed, claimable now
        (``lease_expires`` 0) unless a live lease is held: a running slice keeps its lease
        (no second slice of the thread). The new row, None if missing."""
        ...

    # -- admission and slices --------------------------------------------------------

    async def admit(self, items: Sequence[NewInput]) -> list[Admission]:
        """Insert inputs (already validated by the core) in one transaction, in order.

        A known ``(thread_id, dedup_key)`` inserts nothing and answers the stored input
        with ``duplicate=True``. A missing thread is created when ``item.agent`` is set,
        else NotFound (and nothing of the batch stays). Each new input makes its thread
        ready (sort key :func:`dormant.inbox.sort_key`) when consumable.
        """
        ...

    async def claim_threads(
        self, worker: str, limit: int, lease_s: float, token: str, agents: list[str] | None, cap: int
    ) -> list[Claim]:
        """Lease up to ``limit`` (>= 1) ready threads whose lease expired (of ``agents``
        only, unless None), all with ``token``, until now + ``lease_s``; each thread's
        failures + 1, the new count as the claim's ``attempts``.

        Which threads: fair across tenants (the ``tenant`` column). A tenant's k-th best
        claimable thread by ready key stands at place n + k, n being the live leases its
        tenant holds; the claim takes the best places, ready key breaking ties, and none
        over ``cap`` (a tenant's most leased threads at once; 0: no cap). One statement,
        whose cost grows with the tenants that have ready work, not with the threads."""
        ...

    async def apply_plan(self, plan: CommitPlan) -> None:
        """Apply a checked plan in one transaction: delete the consumed inputs, advance
        the thread (last_seq, awaiting, tokens, runs, summary columns, readiness; failures
        and lease cleared), append ``plan.state`` to the state journal (seqs after its
        newest, ``run`` = the thread's runs after this plan), insert the summary, messages,
        outbox calls, child threads and admissions (as :meth:`admit`).

        Changes nothing and raises LeaseLost when ``plan.token`` no longer holds the lease,
        NotFound when the thread is gone, StoreError when the plan does not fit the stored
        state (messages not continuing ``last_seq``, a summary not moving forward over
        stored messages, a consumed input that is not pending).
        """
        ...

    async def store_counts(self, counts: Sequence[tuple[str, int, int]]) -> None:
        """Write back token counts made on read: for each (thread_id, seq, tokens) set
        the message's ``tokens`` where it is still 0 (one statement; a message deleted
        or counted meanwhile is left as it is)."""
        ...

    async def release(
        self, claim: Claim, *, retry_at: float, error: str | None, fail: bool, wait: str | None = None
    ) -> None:
        """Clear the lease if ``claim`` still holds it: claimable again at ``retry_at``;
        with ``error`` the error kept (the claim counted the failure), without one
        failures - 1 (never below 0: the attempt is given back); with ``fail`` status ``failed``
        (and not ready). ``wait`` is stored as the thread's ``wait_reason`` (until
        ``retry_at``); None clears it."""
        ...

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend to now + ``lease_s`` the leases still held; the renewed claims."""
        ...

    # -- outbox ----------------------------------------------------------------------

    async def claim_outbox(
        self, worker: str, limit: int, lease_s: float, token: str, tools: list[str] | None
    ) -> list[OutboxEntry]:
        """Reconcile expired running entries (idempotent: pending again; others:
        ``unknown`` with :func:`dormant.store.core.result_input` of
        :data:`dormant.inbox.UNKNOWN_OUTCOME` admitted; whatever their tool), then, if
        ``limit`` > 0, lease up to ``limit`` due pending entries (attempts + 1) with
        ``token``, only those whose :func:`dormant.store.core.tool_key` is in ``tools``
        unless None; by id."""
        ...

    async def complete_call(self, item: NewInput) -> Admission:
        """Answer an open call with ``item`` (a validated ``tool_result``, dedup key =
        call id): a duplicate if the key is known, else the call leaves the outbox and
        ``item`` (with the call's tool name) is admitted, one transaction. NotFound if the
        call is not open."""
        ...

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record outcomes (``retry``: pending again at retry_at; ``done``: the entry goes;
        ``dead``: kept dead-lettered) when their lease is held; done/dead admit the result
        (:func:`dormant.store.core.result_input`). Answers, per outcome, if its lease held."""
        ...

    # -- reads (API read connection; the core pages) ---------------------------------

    async def history_rows(
        self, thread_id: str, after: int, limit: int, newest_first: bool, max_bytes: int | None = None
    ) -> list[Message] | None:
        """Up to ``limit`` messages of a thread after seq ``after`` (before it when
        ``newest_first``, newest first); None if the thread is missing. With ``max_bytes``,
        no message whose preceding messages (in this read) already hold more than
        ``max_bytes`` of content (UTF-8) is read: the read ends with the first message
        that crosses the bound, which the core uses to tell there is more."""
        ...

    async def thread_rows(self, after: str, limit: int) -> list[Thread]:
        """Up to ``limit`` threads with id > ``after``, by id."""
        ...

    async def outbox_rows(self, status: str | None, after: int, limit: int) -> list[OutboxEntry]:
        """Up to ``limit`` outbox entries (of ``status`` if given) with id > ``after``, by id."""
        ...

    async def resolve_call(self, entry_id: int) -> OutboxEntry | None:
        """Delete outbox entry ``entry_id`` if it is dead-lettered or of unknown outcome
        (its result is already in its thread); its row, None if missing or in another status."""
        ...

    async def has_work(self, agents: list[str] | None = None) -> bool:
        """Any ready input now (only in threads of ``agents`` when given), any leased
        thread or any pending/running call."""
        ...

    async def status(self) -> StoreStatus:
        """Counts and sizes (see :class:`~dormant.records.StoreStatus`)."""
        ...

    async def tenant_status(self, tenant: str) -> StoreStatus:
        """The counts of the threads whose ``tenant`` column is ``tenant`` (and of their
        inputs, calls and messages); no sizes (0)."""
        ...

    async def delete_threads(self, thread_id: str) -> list[str]:
        """Delete the thread, its descendants, all their rows and the blobs no thread refers
        to any more, one transaction; the ids deleted. NotFound if missing; InvalidInput
        (nothing deleted) while one of them holds a live lease."""
        ...

    # -- optional abilities (fallbacks in BackendDefaults) ---------------------------

    @property
    def commits(self) -> int:
        """Transactions committed so far (benchmarks); fallback 0."""
        ...

    @property
    def path(self) -> str | None:
        """The database file, if the database is one local file; fallback None."""
        ...

    @property
    def persistent(self) -> bool:
        """Whether the data outlives the process (and other processes can share it)."""
        ...

    def subscribe(self, callback: Callable[[str], None]) -> bool:
        """Call ``callback("threads" | "outbox")`` when other processes add work; False
        (fallback) when the backend sends no hints and callers must poll."""
        ...

    async def exists(self) -> bool:
        """Whether the database already exists (without creating it); fallback True."""
        ...

    def diagnose(self, *, quick: bool, now: float, stuck_after_s: float) -> Report:
        """``dormant doctor``: examine the database without opening the store (it may be
        damaged). Fallback: UsageError (this backend has no doctor)."""
        ...

    async def release_caches(self) -> int:
        """Free what the database library can of the caches it holds in this process
        (the RSS governor calls it under memory pressure); how many connections
        gave memory back. Fallback 0: the backend caches nothing here."""
        ...

    def memory_rows(self) -> MemoryBackend:
        """The rows of long-term memory in this database, through this
        backend's own connections, writer and error translation (open store only).
        Every backend has it (no fallback)."""
        ...


class BackendDefaults:
    """The fallbacks of the optional abilities of :class:`Backend`."""

    url: str

    @property
    def commits(self) -> int:
        """No commit counter: 0."""
        return 0

    @property
    def path(self) -> str | None:
        """Not one local file."""
        return None

    @property
    def persistent(self) -> bool:
        """Data outlives the process."""
        return True

    def subscribe(self, callback: Callable[[str], None]) -> bool:
        """No wake-up hints: callers poll."""
        return False

    async def exists(self) -> bool:
        """Assume the database exists (a server creates it)."""
        return True

    def diagnose(self, *, quick: bool, now: float, stuck_after_s: float) -> Report:
        """No doctor for this backend."""
        scheme = self.url.split(":", 1)[0]
        raise UsageError(f"dormant doctor examines SQLite and PostgreSQL stores, not {scheme}:// stores")

    async def release_caches(self) -> int:
        """Nothing cached in this process (a server keeps its own caches): 0."""
        return 0
