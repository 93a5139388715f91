"""Frozen records that cross module boundaries: threads, inputs, messages, plans; the
waits for a person are in :mod:`.waits` (re-exported here).

They are ``msgspec.Struct`` classes (frozen, keyword-only) because they sit on
the hot path: cheap to build, cheap to encode. Stores convert rows to these at
their boundary; nothing passes ``dict[str, Any]`` around.
"""

from __future__ import annotations

from enum import IntEnum
from typing import TYPE_CHECKING, Generic, Literal, TypeVar

import msgspec

from .waits import Approval as Approval
from .waits import ApprovalStatus as ApprovalStatus
from .waits import NewApproval as NewApproval

if TYPE_CHECKING:
    from ..memory.backend import MemoryWrites

T = TypeVar("T")


class Priority(IntEnum):
    """Scheduling class of an input. Lower runs first; aging keeps P2 from starving."""

    P0 = 0  # urgent
    P1 = 1  # normal (default)
    P2 = 2  # bulk


InputKind = Literal["user", "tool_result", "timer", "event", "report"]
INPUT_KINDS: frozenset[str] = frozenset({"user", "tool_result", "timer", "event", "report"})
Role = Literal["user", "assistant", "tool"]
ThreadStatus = Literal["active", "failed"]
#: A completed call leaves the outbox (its result is in the history); dead and unknown stay.
#: An ``external`` call (to a tool the client declared) is never claimed by a dispatcher:
#: it waits for the client's answer (:meth:`Store.complete_call`), however long.
OutboxStatus = Literal["pending", "running", "dead", "unknown", "external"]


class Usage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens a model server counted for its completions (``cached`` is part of ``prompt``).

    On an assistant message: the model call(s) that wrote it; on a thread: the sum of
    every call its committed slices made (compaction and continuations included).
    """

    prompt: int = 0
    completion: int = 0
    cached: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            prompt=self.prompt + other.prompt,
            completion=self.completion + other.completion,
            cached=self.cached + other.cached,
        )

    @property
    def total(self) -> int:
        """Prompt and completion tokens together."""
        return self.prompt + self.completion


#: ``finish_reason`` of a reply cut by the output cap.
CUT = "length"


class ToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """One tool call requested by the model. ``arguments`` is the raw JSON text."""

    id: str
    name: str
    arguments: str


class Part(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A non-text content part of a message: a reference to its stored bytes and their facts.

    ``ref`` is the blob (``sha256:<hex>``) holding the bytes, stored once however often
    they are sent; ``media_type`` was sniffed from the bytes, never taken from the client.
    ``text`` is what a model that cannot see the part is shown (alt text, a caption, a
    PDF's extracted text, the text OCR read in an image), None when there is none. See
    :mod:`dormant.parts`.

    ``ref`` is empty when the bytes are no longer shown: a retention policy kept an old
    part as its facts and text only (:attr:`whole` False), or a full view shows it so.
    """

    kind: Literal["image", "file"]
    media_type: str
    size: int
    ref: str = ""
    width: int = 0
    height: int = 0
    name: str | None = None
    text: str | None = None

    @property
    def whole(self) -> bool:
        """Whether the part still refers to its bytes (else it is its facts and text only)."""
        return bool(self.ref)


class Message(msgspec.Struct, frozen=True, kw_only=True):
    """One entry of a thread's history, numbered by ``seq`` (1, 2, ...) within the thread.

    ``input_id`` names the input a user/tool message was made from, so a store can
    refuse to record the same input twice.
    """

    seq: int
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    source: str | None = None
    input_id: int | None = None
    created_at: float = 0.0
    #: prompt tokens of the message, counted once when it is written (0: not counted:
    #: written before schema 2, or under limits that do not count tokens; a view whose
    #: limits count tokens counts it when it reads it)
    tokens: int = 0
    #: an assistant message: the server's ``finish_reason`` (``"length"``: cut by the
    #: output cap, see :attr:`cut`), None when it sent none or for other roles
    finish_reason: str | None = None
    #: an assistant message: the model's reasoning text, kept apart from the answer (and
    #: sent back only to a server whose dialect asks for it), None when there was none
    reasoning: str | None = None
    #: an assistant message: the tokens the server counted for the call(s) that wrote it
    usage: Usage | None = None
    #: the message's images and files, in order, after its text (references, never bytes)
    parts: tuple[Part, ...] = ()

    @property
    def cut(self) -> bool:
        """Whether the output cap cut this (assistant) message short."""
        return self.finish_reason == CUT


class NewInput(msgspec.Struct, frozen=True, kw_only=True):
    """An input to admit. ``(thread_id, dedup_key)`` identifies it for ever."""

    thread_id: str
    kind: InputKind
    dedup_key: str
    content: str
    priority: Priority = Priority.P1
    not_before: float = 0.0
    call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    source: str | None = None
    agent: str | None = None  # create the thread with this agent if it does not exist
    #: a hash of the request that sent it (at most :data:`MAX_FINGERPRINT` characters),
    #: stored with its dedup key: a later admission of the same key with another
    #: fingerprint is refused (IdempotencyMismatch) and writes nothing; None: not checked
    fingerprint: str | None = None
    #: the tools the sender runs itself (a JSON array of function schemas, at most
    #: :data:`MAX_CLIENT_TOOLS_BYTES`; see :mod:`dormant.tools.external`): when the input is
    #: admitted (not a duplicate) they become its thread's :attr:`Thread.client_tools`,
    #: ``"[]"`` clearing them; None leaves the thread's as they are
    tools: str | None = None
    #: its images and files, already stored as blobs (:func:`dormant.parts.store_parts`)
    parts: tuple[Part, ...] = ()


#: Longest :attr:`NewInput.fingerprint` (a hash in hex, with a short scheme prefix).
MAX_FINGERPRINT = 128
#: Most bytes (UTF-8) of :attr:`NewInput.tools`, the client's tool schemas as JSON.
MAX_CLIENT_TOOLS_BYTES = 64 * 1024


class Input(msgspec.Struct, frozen=True, kw_only=True):
    """An admitted input, as stored."""

    id: int
    thread_id: str
    kind: InputKind
    dedup_key: str
    content: str
    priority: Priority
    not_before: float
    admitted_at: float
    call_id: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    source: str | None = None
    #: its images and files (references to stored blobs), in order after its text
    parts: tuple[Part, ...] = ()


class Admission(msgspec.Struct, frozen=True, kw_only=True):
    """The answer to an admission: durable when returned. ``duplicate`` if seen before."""

    input_id: int
    thread_id: str
    dedup_key: str
    duplicate: bool


class Thread(msgspec.Struct, frozen=True, kw_only=True):
    """A thread's metadata row (never its history)."""

    id: str
    agent: str
    parent_id: str | None = None
    parent_seq: int = 0
    status: ThreadStatus = "active"
    last_seq: int = 0
    awaiting: int = 0
    failures: int = 0
    error: str | None = None
    created_at: float = 0.0
    updated_at: float = 0.0
    #: tokens of all the thread's own messages, and of those its latest summary covers
    #: (the stored counts: messages stored uncounted add 0)
    tokens: int = 0
    summarized_tokens: int = 0
    #: the last seq the latest compaction summary covers (0: never compacted)
    summary_seq: int = 0
    #: tokens the model server counted for the thread's committed slices (:attr:`usage`)
    usage_prompt: int = 0
    usage_completion: int = 0
    usage_cached: int = 0
    #: why the thread waits without counting a failure (its model endpoint is down or its
    #: circuit breaker open), and until when; None once a slice commits or fails
    wait_reason: str | None = None
    wait_until: float = 0.0
    #: the tools its client runs itself (JSON array of function schemas), shown to the
    #: model beside the agent's own; a call to one is an ``external`` outbox entry that
    #: waits for the client's answer. Set by the newest admitted input that carried
    #: :attr:`NewInput.tools`; None: none
    client_tools: str | None = None
    #: whether a slice holds the thread's lease now (or held it when its worker died)
    leased: bool = False

    @property
    def failed_attempts(self) -> int:
        """Slices of this thread that failed in a row: :attr:`failures` less the attempt a
        running slice counted when it was claimed (a healthy running thread shows 0)."""
        return max(0, self.failures - 1) if self.leased else self.failures

    @property
    def usage(self) -> Usage:
        """The tokens the model server counted for this thread, summed."""
        return Usage(prompt=self.usage_prompt, completion=self.usage_completion, cached=self.usage_cached)

    @property
    def tokens_since_summary(self) -> int:
        """Tokens of the messages written after the latest summary's position."""
        return self.tokens - self.summarized_tokens


class Summary(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction summary of a thread's history up to and including ``upto_seq``.

    ``covered_tokens`` is the thread's cumulative message tokens through ``upto_seq``;
    ``made_at_seq`` the thread's ``last_seq`` when the summary was written, so a child
    thread spawned at ``parent_seq`` only ever sees summaries with ``made_at_seq <=
    parent_seq``: exactly the history it inherited.
    """

    thread_id: str
    upto_seq: int
    content: str
    tokens: int
    covered_tokens: int
    made_at_seq: int
    created_at: float = 0.0


class BlobRef(msgspec.Struct, frozen=True, kw_only=True):
    """A stored blob: ``ref`` is ``sha256:<hex>`` of its bytes, ``size`` their count."""

    ref: str
    size: int


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """A worker's lease on a thread. ``token`` proves ownership at commit time."""

    thread_id: str
    token: str
    expires_at: float
    agent: str = ""  # the thread's agent (so a slice knows its view budget before loading)
    #: slices of this thread claimed since its last commit, this one included (counted
    #: at claim, so a worker that dies mid-slice counts too; 0: not counted)
    attempts: int = 0


class ViewLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what a slice loads: history tokens, messages and bytes, inputs and input bytes.

    ``max_tokens`` is the prompt budget for history (summary included); the message and
    byte bounds cap the RAM a view holds whatever the model's window.
    """

    max_messages: int = 64
    max_bytes: int = 256 * 1024
    max_tokens: int = 100_000
    #: the encoding of ``max_tokens`` (clipped messages are counted again in it)
    encoding: str = "o200k_base"
    max_inputs: int = 32
    max_input_bytes: int = 2 * 1024 * 1024

    @property
    def counts_tokens(self) -> bool:
        """Whether token counts can decide anything about a view of these limits.

        A token is at least one UTF-8 byte and a character at most four, so a message
        costs at most four tokens per byte of ``message_bytes`` (which has room for
        the per-message and per-call framing). When four times the byte cap fits the
        token budget, no view that fits the byte cap can pass the token budget:
        nothing is counted then, and the tokenizer is never loaded.
        """
        return MAX_TOKENS_PER_BYTE * self.max_bytes > self.max_tokens


#: Most tokens one character of text can cost (a byte-level BPE token covers at least
#: one UTF-8 byte, and a character is at most four).
MAX_TOKENS_PER_BYTE = 4


class SliceLoad(msgspec.Struct, frozen=True, kw_only=True):
    """What a slice starts from: thread row, bounded view (oldest first), ready inputs."""

    thread: Thread
    view: tuple[Message, ...]
    inputs: tuple[Input, ...]
    #: the compaction summary the view starts from (own, or inherited from an ancestor)
    summary: Summary | None = None
    #: how many of ``view``'s messages (its oldest) were inherited from ancestors
    inherited: int = 0
    #: (tokens, bytes) ``view`` weighs against the budget (:func:`dormant.view.builder.view_usage`)
    #: when the loader knew them, so a slice need not add them up again; None: not known
    usage: tuple[int, int] | None = None
    #: the thread's state journal replayed (key -> JSON value), read from its row with
    #: the load at no extra query; None: not on the row (over its bound, or written before
    #: the row carried it): replay the journal (:meth:`StateJournal.recover`)
    state: dict[str, str] | None = None


class NewCall(msgspec.Struct, frozen=True, kw_only=True):
    """An async tool call to put in the outbox; an ``external`` one (a client tool's) is
    stored with status ``external``: no dispatcher claims it, only an answer from
    outside (:meth:`Store.complete_call`) ends it."""

    call_id: str
    tool: str
    arguments: str
    idempotent: bool = False
    external: bool = False


class NewThread(msgspec.Struct, frozen=True, kw_only=True):
    """A child thread created by a slice; it sees its parent's history up to ``parent_seq``."""

    id: str
    agent: str
    parent_id: str
    parent_seq: int


StateOp = Literal["add", "update", "delete"]
JournalKind = Literal["add", "update", "delete", "full", "incremental"]


class StateChange(msgspec.Struct, frozen=True, kw_only=True):
    """One change of a thread's key/value state, written with a slice's commit:
    ``add`` or ``update`` set ``key`` to ``value`` (JSON text), ``delete`` removes it."""

    op: StateOp
    key: str
    value: str | None = None


class JournalEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One row of a thread's state journal (``seq`` numbers the thread's journal).

    A change record (``add``/``update``/``delete``: ``key`` and ``value``) or a
    checkpoint header (``full`` or ``incremental``): ``upto`` is the journal seq it
    covers, its body is ``parts`` pieces of ``size`` bytes with sha256 ``digest``, and
    it counts for recovery only once ``recoverable`` (set after it was verified
    complete). ``run`` is the thread's run count when the entry was written.
    """

    thread_id: str
    seq: int
    kind: JournalKind
    key: str | None = None
    value: str | None = None
    run: int = 0
    upto: int = 0
    parts: int = 0
    size: int = 0
    digest: str | None = None
    recoverable: bool = False
    created_at: float = 0.0
    #: the thread's message seq when the entry was written (its ``last_seq`` after the
    #: slice that wrote a change record; what a checkpoint's state goes with): where
    #: :meth:`~dormant.runtime.Runtime.fork` and ``rewind`` branch the history
    msg_seq: int = 0


class CommitPlan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything one slice changes, applied by the store in one transaction.

    ``consumed`` inputs are marked processed, ``messages`` appended (their ``seq``
    continue ``thread.last_seq``), ``calls`` written to the outbox, ``threads``
    created, ``admissions`` admitted (to this or other threads), ``awaiting`` is
    the thread's new count of unanswered async tool calls. The lease is released.
    """

    thread_id: str
    token: str
    consumed: tuple[int, ...]
    messages: tuple[Message, ...]
    calls: tuple[NewCall, ...] = ()
    #: calls and questions that wait for a person (counted in ``awaiting``), not in the outbox
    approvals: tuple[NewApproval, ...] = ()
    threads: tuple[NewThread, ...] = ()
    admissions: tuple[NewInput, ...] = ()
    awaiting: int = 0
    #: a compaction summary written by this slice (it covers messages already stored)
    summary: Summary | None = None
    #: the tokens of every model call this slice made (compaction included), added to
    #: the thread's :attr:`Thread.usage`
    usage: Usage | None = None
    #: state changes journaled in the same transaction (:class:`StateChange`)
    state: tuple[StateChange, ...] = ()
    #: runs this slice ends (an agent-declared unit; by default one per user turn)
    runs: int = 0
    #: the thread's whole journal state once ``state`` is applied, as JSON text (a
    #: :func:`dormant.store.rows.state_row`), stored on the thread row for the next load;
    #: None: not known to the slice (then a plan with ``state`` changes clears the row's)
    state_json: str | None = None
    #: the thread's subject (a binding key), stored on its row when not None: how a
    #: subject's other threads are found (:meth:`Store.subject_threads`)
    subject: str | None = None
    #: long-term memory writes (``remember``, ``forget``, the long-term register, the
    #: facts of a compaction), built and embedded before the commit and written in the
    #: same transaction; never encoded (a store writes them as rows)
    memory: MemoryWrites | None = None


class OutboxEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A claimed (or listed) async tool call."""

    id: int
    thread_id: str
    agent: str
    call_id: str
    tool: str
    arguments: str
    status: OutboxStatus
    attempts: int
    idempotent: bool
    token: str | None = None
    last_error: str | None = None
    created_at: float = 0.0


OutcomeKind = Literal["done", "retry", "dead"]


class OutboxOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a dispatcher finished a claimed entry.

    ``done`` and ``dead`` admit ``content`` as the call's tool result (dedup key =
    call id) in the same transaction; ``retry`` makes the entry claimable again at
    ``retry_at``. A ``done`` result may carry ``parts``: the images and files the tool
    returned, already stored as blobs the thread refers to; they go on the result input.
    """

    entry_id: int
    token: str
    kind: OutcomeKind
    content: str = ""
    is_error: bool = False
    retry_at: float = 0.0
    error: str | None = None
    parts: tuple[Part, ...] = ()


class Page(msgspec.Struct, Generic[T], frozen=True, kw_only=True):
    """A bounded page of results. ``next_cursor`` is None on the last page."""

    items: tuple[T, ...]
    next_cursor: str | None = None


#: How many agents :attr:`StoreStatus.ready_by_agent` names at most.
READY_AGENTS_SHOWN = 20
#: How many wait reasons :attr:`StoreStatus.waiting_by_reason` names at most.
WAIT_REASONS_SHOWN = 5


class StoreStatus(msgspec.Struct, frozen=True, kw_only=True):
    """Counts for ``dormant status``; every figure is a number, never a list."""

    threads_by_status: dict[str, int]
    threads_ready: int
    threads_leased: int
    backlog_by_priority: dict[str, int]
    outbox_by_status: dict[str, int]
    dead_letters: int
    messages: int
    db_bytes: int = 0
    wal_bytes: int = 0
    schema_version: int = 0
    #: ready threads (claimable now) by agent, the :data:`READY_AGENTS_SHOWN` agents with
    #: the most: a worker claims only its agents' threads, so an agent no running worker
    #: hosts shows here while its threads wait
    ready_by_agent: dict[str, int] = {}
    #: tokens the model servers counted, summed over all threads: ``prompt``,
    #: ``completion``, ``cached``
    usage: dict[str, int] = {}
    #: threads waiting on a model endpoint (outage or open circuit breaker), the latest
    #: time one of them waits until, and the :data:`WAIT_REASONS_SHOWN` most common reasons
    threads_waiting: int = 0
    waiting_until: float = 0.0
    waiting_by_reason: dict[str, int] = {}


class RetentionMark(msgspec.Struct, frozen=True, kw_only=True):
    """What retention policies deleted of one thread's history: ``pruned`` messages in
    all, every message up to seq ``up_to_seq``, the last time (``pruned_at``) under
    ``policy`` (its name). Shown wherever the history is read."""

    pruned: int
    up_to_seq: int
    policy: str
    pruned_at: float


class TierSizes(msgspec.Struct, frozen=True, kw_only=True):
    """Bytes each retention tier takes in the store (see :mod:`dormant.retention.policy`)."""

    #: tool results kept whole
    tool_full: int = 0
    #: tool results cut to an excerpt by retention
    tool_excerpt: int = 0
    #: every other message
    history: int = 0
    #: the state journal: change records, checkpoint headers and bodies
    journal: int = 0
    #: blobs (large tool outputs)
    blobs: int = 0
    #: dedup keys (kept for the dedup horizon)
    dedup_keys: int = 0

    def items(self) -> list[tuple[str, int]]:
        """``(tier name, bytes)`` for every tier."""
        return [(name, getattr(self, name)) for name in self.__struct_fields__]


class Tenant(msgspec.Struct, frozen=True, kw_only=True):
    """A tenant of ``dormant serve``: ``id`` (``t`` + 12 hex digits, fixed length) scopes
    everything it owns; ``name`` is unique."""

    id: str
    name: str
    created_at: float


class ApiKey(msgspec.Struct, frozen=True, kw_only=True):
    """An API key's public part (never its secret, never its hash)."""

    id: str
    tenant_id: str
    created_at: float
    revoked_at: float | None = None
