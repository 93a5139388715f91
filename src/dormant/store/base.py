"""The store protocol: the domain operations the rest of dormant calls.

Every method is a domain operation (admit, claim, load, commit, ...), never
generic CRUD. :class:`~dormant.store.core.StoreCore` implements it once, over a
:class:`~dormant.store.backend.Backend` per database that owns its SQL. The
contract suite in ``tests/contract`` runs against every backend. All methods raise
:class:`~dormant.errors.StoreError` (or a subclass) when the store fails, and
nothing is acknowledged before it is durable.

Tenant scope: every thread, input and blob operation takes ``tenant`` (keyword-only;
None, the default, is the library's unscoped access). With a tenant id, a thread id
outside that tenant (:func:`~dormant.tenants.scope.tenant_of`) is NotFound, the same
as a thread that never existed, and nothing is read or written; listings hold only
the tenant's threads. ``dormant serve`` passes the caller's tenant on every call.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from ..records import (
    Admission,
    ApiKey,
    Approval,
    BlobRef,
    Claim,
    CommitPlan,
    Message,
    NewInput,
    OutboxEntry,
    OutboxOutcome,
    Page,
    RetentionMark,
    SliceLoad,
    StoreStatus,
    Summary,
    Tenant,
    Thread,
    TierSizes,
    ViewLimits,
)

if TYPE_CHECKING:
    from ..memory.backend import MemoryBackend
    from ..view.cache import ViewCache
    from .health import Report
    from .journal import StateJournal
    from .views import ViewReads

#: Largest page any paged read returns, whatever the caller asks for.
MAX_PAGE = 1000


class Store(Protocol):
    """A durable home for threads, inputs, messages, blobs and the outbox."""

    url: str
    #: the view cache (one per store, handed in or created from its byte budget): the
    #: RSS governor reads its size and shrinks it
    views: ViewCache
    #: what building views read from the database (benchmarks; a cache hit reads nothing)
    view_reads: ViewReads
    #: bytes :meth:`read_blob` returned so far (for benchmarks)
    blob_read_bytes: int
    #: the state journal (recovery, checkpoints, paged reads); plans carry its change records
    journal: StateJournal

    @property
    def commits(self) -> int:
        """Transactions committed so far (benchmarks); 0 when the backend does not count."""
        ...

    @property
    def path(self) -> str | None:
        """The database file when the database is one local file, else None."""
        ...

    @property
    def persistent(self) -> bool:
        """Whether the data outlives this process (False for ``memory://``)."""
        ...

    def subscribe(self, callback: Callable[[str], None]) -> bool:
        """Ask for wake-up hints (``"threads"``/``"outbox"``) when other processes add
        work. Returns False when the store sends none (callers then only poll)."""
        ...

    async def exists(self) -> bool:
        """Whether the database already exists (opening would not create it)."""
        ...

    def diagnose(self, *, quick: bool, now: float, stuck_after_s: float) -> Report:
        """``dormant doctor``: examine the database without opening the store; UsageError
        for a store doctor cannot examine."""
        ...

    async def release_caches(self) -> int:
        """Give back what the database library caches in this process (SQLite's page
        caches; the RSS governor calls it under memory pressure). Returns how many
        connections released memory (0 for a store that caches nothing here)."""
        ...

    def memory_rows(self) -> MemoryBackend:
        """The rows of long-term memory in this store, through the store's own
        connections (open store only); :class:`~dormant.memory.core.MemoryCore` puts its
        rules over them. UsageError for a store that holds no memory."""
        ...

    async def open(self) -> None:
        """Create or migrate the schema; refuse a newer schema with SchemaError."""
        ...

    async def close(self) -> None:
        """Flush pending writes and release connections."""
        ...

    async def create_thread(
        self, thread_id: str, agent: str, *, tenant: str | None = None, state: Mapping[str, str] | None = None
    ) -> Thread:
        """Create a thread if it does not exist (with ``state`` journaled, when new);
        return the stored row either way."""
        ...

    async def get_thread(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """The thread's row; NotFound if it does not exist."""
        ...

    async def admit(self, items: Sequence[NewInput], *, tenant: str | None = None) -> list[Admission]:
        """Admit inputs durably; a known ``(thread_id, dedup_key)`` changes nothing.

        A missing thread is created when ``item.agent`` is set, else NotFound.
        The whole batch commits or none of it does.
        """
        ...

    async def claim_threads(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        agents: Collection[str] | None = None,
        tenant_slices: int = 0,
    ) -> list[Claim]:
        """Lease up to ``limit`` threads with ready input; with ``agents``, only threads of
        those agents (the ones the worker hosts: a thread no worker can serve waits, see
        ``StoreStatus.ready_by_agent``).

        Fair across tenants: slices are shared out evenly between the tenants that have
        ready work (a tenant's next thread comes before another's, the more leases that
        other holds), each tenant's threads best key first; a tenant never holds more than
        ``tenant_slices`` leases (0: no cap). One tenant's backlog, however old, so never
        starves another's urgent input. With one tenant: best key first.

        Each claim counts an attempt: the thread's failure count grows by one, and the
        claim carries the new count (:attr:`~dormant.records.Claim.attempts`); a commit
        resets it, a release without an error gives the attempt back. A worker that dies
        mid-slice so leaves its attempt counted."""
        ...

    async def load_slice(self, claim: Claim, limits: ViewLimits) -> SliceLoad:
        """The claimed thread's row, bounded view and ready inputs (admission order)."""
        ...

    async def commit_slice(self, plan: CommitPlan) -> None:
        """Apply a slice's plan in one transaction and release the lease.

        Raises LeaseLost (and changes nothing) when the lease is no longer held.
        """
        ...

    async def release(
        self,
        claim: Claim,
        *,
        retry_at: float = 0.0,
        error: str | None = None,
        fail: bool = False,
        wait: str | None = None,
    ) -> None:
        """Give a lease back without a commit (the slice failed).

        The thread is not claimable before ``retry_at``; with ``error`` the attempt the
        claim counted stays a failure, without one it is given back; with ``fail`` the
        thread is marked failed until retried. ``wait`` says why the thread waits
        (its model endpoint is down): kept as its ``wait_reason`` until ``retry_at``
        (``wait_until``), cleared by its next release, commit or retry.
        """
        ...

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        """Extend the leases still held; the ones missing from the answer were lost."""
        ...

    async def retry_thread(self, thread_id: str, *, tenant: str | None = None) -> Thread:
        """Make a failed thread active again (failure count reset)."""
        ...

    async def wake_waiting(self, endpoint: str) -> int:
        """Make the threads that wait on model ``endpoint`` (an outage: their
        ``wait_reason`` names it) claimable now; how many. A running slice keeps its lease."""
        ...

    async def claim_outbox(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        tools: Collection[tuple[str, str]] | None = None,
    ) -> list[OutboxEntry]:
        """Lease up to ``limit`` due outbox entries; with ``tools``, only calls of those
        ``(agent, tool)`` pairs (the ones the worker has).

        First reconciles entries whose running lease expired: idempotent ones
        become pending again, the others ``unknown`` with an outcome-unknown
        result admitted to their thread.
        """
        ...

    async def complete_call(
        self, thread_id: str, call_id: str, content: str, *, is_error: bool = False, tenant: str | None = None
    ) -> Admission:
        """Answer an open async call from outside the dispatcher (a webhook, say).

        The call leaves the outbox and its result is admitted (dedup key = call id)
        in one transaction; the first answer wins. Answering an answered call again
        returns the existing admission with ``duplicate=True``; a call that is not
        in the outbox raises NotFound; an oversized result, InvalidInput.
        """
        ...

    # -- waits for a person (rules: :class:`~dormant.store.core_approvals.ApprovalRules`)

    async def approvals(
        self,
        *,
        tenant: str | None = None,
        thread_id: str | None = None,
        tool: str | None = None,
        status: str = "open",
        older_than_s: float = 0.0,
        cursor: str | None = None,
        limit: int = 100,
    ) -> Page[Approval]:
        """A page of waits for a person, oldest first (see ApprovalRules.approvals)."""
        ...

    async def approval(self, thread_id: str, call_id: str, *, tenant: str | None = None) -> Approval:
        """One wait; NotFound if none."""
        ...

    async def open_approvals(self, *, tenant: str | None = None) -> tuple[int, float | None]:
        """Open waits and the oldest's request time."""
        ...

    async def decide_approval(
        self,
        thread_id: str,
        call_id: str,
        *,
        status: str,
        result: str = "",
        arguments: str | None = None,
        key: str | None = None,
        by: str | None = None,
        note: str | None = None,
        tenant: str | None = None,
    ) -> tuple[bool, Approval]:
        """Act on an open wait, one transaction (see ApprovalRules.decide_approval)."""
        ...

    async def expire_approvals(self, limit: int = 500) -> tuple[int, int]:
        """One expiry round: (expired, escalated)."""
        ...

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        """Record dispatcher outcomes; ``done``/``dead`` admit the result in the same
        transaction. Answers, per outcome, whether its lease was still held."""
        ...

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
        """One page of a thread's own messages, from ``cursor`` on."""
        ...

    async def list_threads(
        self, *, cursor: str | None = None, limit: int = 50, tenant: str | None = None
    ) -> Page[Thread]:
        """One page of threads ordered by id; with ``tenant``, only that tenant's (its
        cursor must be one of its ids; UsageError for the default tenant '')."""
        ...

    async def list_outbox(
        self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
    ) -> Page[OutboxEntry]:
        """One page of outbox entries (optionally of one status) ordered by id."""
        ...

    async def latest_summary(self, thread_id: str, *, tenant: str | None = None) -> Summary | None:
        """The thread's newest compaction summary, None if never compacted (NotFound: no thread)."""
        ...

    async def resolve_call(self, entry_id: int, *, tenant: str | None = None) -> OutboxEntry:
        """Remove a dead-lettered or outcome-unknown call once dealt with (NotFound otherwise)."""
        ...

    async def has_work(self, agents: Sequence[str] | None = None) -> bool:
        """Whether any input is ready now (in a thread of one of ``agents``, when given:
        a runtime waits only for work it can do), any slice is leased or any call is open."""
        ...

    async def status(self, tenant: str | None = None) -> StoreStatus:
        """Counts of threads, backlog, outbox and sizes; with ``tenant`` (a tenant id),
        only the counts of that tenant's threads (sizes 0)."""
        ...

    async def delete_thread(self, thread_id: str, *, tenant: str | None = None) -> int:
        """Delete a thread and all its descendants (they inherit its history by reference)
        with every row of theirs, then every blob no thread refers to any more, in one
        transaction. Returns how many threads were deleted.

        Raises NotFound for a missing thread, and InvalidInput (deleting nothing) while
        any of those threads holds a live lease (a slice is running).
        """
        ...

    # -- blobs (see dormant.tools.blobs) ---------------------------------------------------

    async def shrink_tool_results(self, thread_id: str, *, keep: int, head_chars: int, limit: int) -> int:
        """Retention: cut at most ``limit`` tool results older than the thread's ``keep``
        newest to ``head_chars`` characters and a note (messages stay; blobs no thread
        refers to any more are collected); how many."""
        ...

    async def demote_parts(self, thread_id: str, *, keep: int, limit: int) -> int:
        """Retention: keep at most ``limit`` messages' images and files older than the
        thread's ``keep`` newest parts as their facts and text only (their blob
        references dropped; blobs no message, input or whole tool result of any thread
        refers to any more are collected); how many messages."""
        ...

    async def prune_history(
        self, thread_id: str, *, keep_runs: int, keep_tool_calls: int, limit: int, policy: str = "long-run"
    ) -> int:
        """Retention: delete whole runs older than the thread's ``keep_runs`` newest and
        than the run of its oldest whole tool result (its ``keep_tool_calls`` newest are
        whole) that its summary covers (never in a thread with children), about
        ``limit`` messages at most; how many messages. The thread's
        :class:`~dormant.records.RetentionMark` records them, under ``policy``, in the
        same transaction."""
        ...

    async def retention_mark(self, thread_id: str, *, tenant: str | None = None) -> RetentionMark | None:
        """What retention deleted of the thread's history (None: nothing); ``tenant``: the
        tenant the thread must belong to."""
        ...

    async def prune_summaries(self, thread_id: str, *, keep: int, limit: int) -> int:
        """Retention: delete up to ``limit`` superseded summaries of the thread that no
        view, child or fork at a stored seq can read (its ``keep`` newest stay); how many."""
        ...

    async def prune_dedup_keys(self, *, before: float, limit: int) -> int:
        """Retention: forget up to ``limit`` dedup keys admitted before ``before`` whose
        input was consumed and that no outbox entry names; how many."""
        ...

    async def retention_sizes(self) -> TierSizes:
        """Bytes each retention tier takes (reads every message: not for a hot path)."""
        ...

    async def oldest_ready_at(self) -> float | None:
        """When the oldest input a thread could consume now was admitted (None: none)."""
        ...

    async def fork_thread(self, source: str, new_id: str, at_seq: int, state: Mapping[str, str]) -> Thread:
        """A new thread branching from ``source`` after its message ``at_seq`` (a child:
        its views read ``source``'s history up to there), with ``state`` journaled;
        ``source`` is never changed. NotFound, UsageError (``new_id`` exists, ``at_seq``
        out of range), InvalidInput (id, state)."""
        ...

    async def subject_threads(
        self, thread_id: str, subject: str, *, limit: int = 64, tenant: str | None = None
    ) -> list[str]:
        """The other active threads of ``thread_id``'s tenant with ``subject`` on their
        row (a binding key), most recently updated first, at most ``limit``."""
        ...

    async def put_blob(
        self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes], *, tenant: str | None = None
    ) -> BlobRef:
        """Store the concatenation of ``chunks`` (pieces of any size) as one blob that
        ``thread_id`` refers to, and return its ref (``sha256:<hex>``) and size.

        The pieces are streamed in fixed chunks under a ``tmp:`` ref, in bounded write
        batches: RAM holds one batch, never the blob. The same bytes are stored once
        (content-addressed); each put adds the thread's reference. Durable before it
        returns. Raises NotFound for a missing thread (then nothing stays stored).
        """
        ...

    async def part_bytes_today(self, thread_id: str, *, tenant: str | None = None) -> int:
        """Bytes of the image and file parts the thread took since the start of the UTC
        day (by the store's clock): its pending inputs admitted since and its messages
        written since (what retention deleted no longer counts)."""
        ...

    async def get_blob(self, thread_id: str, ref: str, *, tenant: str | None = None) -> BlobRef:
        """The blob ``ref`` if ``thread_id`` or one of its ancestors refers to it; NotFound
        otherwise (whether it exists for another thread is not revealed)."""
        ...

    async def read_blob(
        self, thread_id: str, ref: str, offset: int = 0, length: int = 65536, *, tenant: str | None = None
    ) -> bytes:
        """Bytes ``offset .. offset + length`` of the blob ``ref`` (fewer at its end; none
        past it), reading only the chunks that hold them.

        Visibility as :meth:`get_blob` (NotFound otherwise). ``length`` is capped at
        1 MiB; a negative offset or length raises UsageError.
        """
        ...

    async def sweep_blobs(self) -> int:
        """Remove what blob writes that never finished left behind more than
        :data:`~dormant.tools.blobs.TMP_TTL_S` ago; returns how many chunks went."""
        ...

    # -- tenants and API keys (``dormant serve``; see :mod:`dormant.tenants.keys`) ---------

    async def create_tenant(self, name: str) -> Tenant:
        """A new tenant named ``name``; UsageError for a bad or taken name."""
        ...

    async def tenant(self, name_or_id: str) -> Tenant:
        """The tenant with that id (else that name); NotFound otherwise."""
        ...

    async def list_tenants(self, *, cursor: str | None = None, limit: int = 50) -> Page[Tenant]:
        """One page of tenants by name; the cursor is the last name seen."""
        ...

    async def create_key(self, tenant_id: str) -> tuple[ApiKey, str]:
        """A new key of the tenant and its token, shown once: only a salted hash is kept.
        NotFound for an unknown tenant."""
        ...

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke a key (a revoked key keeps its first revocation time); NotFound if unknown."""
        ...

    async def list_keys(self, tenant_id: str, *, cursor: str | None = None, limit: int = 50) -> Page[ApiKey]:
        """One page of the tenant's keys by id; the cursor is the last key id seen."""
        ...

    async def authenticate(self, token: str) -> Tenant:
        """The tenant whose live key ``token`` is; Unauthenticated otherwise (without saying why)."""
        ...


def clamp_limit(limit: int) -> int:
    """A page size in 1..MAX_PAGE."""
    return max(1, min(int(limit), MAX_PAGE))


def seq_cursor(cursor: str | None, *, default: int) -> int:
    """Parse a message cursor (a seq number) or raise UsageError."""
    from ..errors import UsageError

    if cursor is None or cursor == "":
        return default
    try:
        return int(cursor)
    except ValueError:
        raise UsageError(f"bad cursor {cursor!r}") from None
