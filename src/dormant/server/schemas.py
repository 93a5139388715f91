"""Request and response bodies of the native REST API (v1), as pydantic models.

They are the JSON schema the OpenAPI document publishes and the validation every
request goes through; records convert to them here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field

from ..records import Message, StoreStatus, Thread, Usage
from ..tenants.scope import THREAD_ID_PATTERN, Scope

#: How an input that arrives while its thread runs a slice is handled.
Strategy = Literal["enqueue", "reject", "interrupt", "rollback"]


class Body(BaseModel):
    """A request body: unknown fields are refused, so a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code`` (see :mod:`dormant.errors`) and a message."""

    code: str
    message: str


class ErrorBody(BaseModel):
    """Every error response."""

    error: ErrorDetail


class ThreadCreate(Body):
    """Create a thread (idempotent: an existing id is returned as it is)."""

    id: str | None = Field(None, pattern=THREAD_ID_PATTERN, description="default: a new random id")
    agent: str | None = Field(None, max_length=128, description="default: the server's first agent")
    identity: dict[str, str] | None = Field(
        None,
        max_length=16,
        description="identity parts (e.g. phone, device) of the person the thread serves: their "
        "binding key is journaled as the new thread's subject in the same transaction (an existing "
        "thread is returned unchanged)",
    )


class UsageOut(BaseModel):
    """Tokens a model server counted (``cached`` is part of ``prompt``)."""

    prompt: int
    completion: int
    cached: int

    @classmethod
    def of(cls, usage: Usage) -> UsageOut:
        """The wire form of ``usage``."""
        return cls(prompt=usage.prompt, completion=usage.completion, cached=usage.cached)


class ThreadOut(BaseModel):
    """A thread's metadata (never its history): ``usage`` sums the model tokens of its
    committed slices; ``wait_reason`` / ``wait_until`` say why and until when it waits on
    a model endpoint that is down (null when it does not)."""

    id: str
    agent: str
    parent_id: str | None
    status: str
    last_seq: int
    awaiting: int
    failures: int
    error: str | None
    created_at: float
    updated_at: float
    usage: UsageOut
    wait_reason: str | None = None
    wait_until: float | None = None

    @classmethod
    def of(cls, thread: Thread, scope: Scope) -> ThreadOut:
        """The tenant's view of ``thread``."""
        parent = scope.outer(thread.parent_id) if thread.parent_id else None
        return cls(
            id=scope.outer(thread.id),
            agent=thread.agent,
            parent_id=parent,
            status=thread.status,
            last_seq=thread.last_seq,
            awaiting=thread.awaiting,
            failures=thread.failed_attempts,
            error=thread.error,
            created_at=thread.created_at,
            updated_at=thread.updated_at,
            usage=UsageOut.of(thread.usage),
            wait_reason=thread.wait_reason,
            wait_until=thread.wait_until if thread.wait_reason is not None else None,
        )


class ThreadPage(BaseModel):
    """One page of threads; pass ``next_cursor`` back as ``cursor`` for the next."""

    items: list[ThreadOut]
    next_cursor: str | None


class RegistersOut(BaseModel):
    """A thread's registers (``Runtime.registers``): its subject (a binding key, or null
    for a thread without one), its user-turn counter, its short-term register (the
    entity anchors set in its last turns, key -> value) and its subject's long-term
    register (the profile, key -> value)."""

    subject: str | None
    turn: int
    short_term: dict[str, Any]
    long_term: dict[str, Any]


class InputCreate(Body):
    """User text for a thread (created with ``agent`` when new)."""

    content: str = Field(..., description="the text; its UTF-8 size is limited by the server")
    agent: str | None = Field(None, max_length=128)
    priority: Literal[0, 1, 2] = Field(1, description="0 urgent, 1 normal, 2 bulk")
    strategy: Strategy = Field(
        "enqueue",
        description="if the thread runs a slice: queue behind it (enqueue), 409 (reject), or cancel it "
        "so its inputs run with this one (interrupt; rollback also voids its live text on event streams)",
    )
    identity: dict[str, str] | None = Field(
        None,
        max_length=16,
        description="the sender's identity parts (e.g. phone, device): their binding key is the "
        "input's source and the thread's subject from the slice that takes it",
    )
    parts: list[PartIn] = Field(
        [], max_length=256, description="images and files after the text, in order (base64)"
    )


class PartIn(Body):
    """An image or a file of an input, its bytes in base64 (bounded by the request body
    limit). Its media type is sniffed from the bytes, never taken from the client."""

    type: Literal["image", "file"]
    data: str = Field(..., description="the bytes, base64 (standard alphabet, padded)")
    name: str | None = Field(None, max_length=256, description="a file name shown to the model")
    text: str | None = Field(
        None, max_length=64 * 1024, description="alt text of an image, or the text of a file"
    )


class PartOut(BaseModel):
    """An image or a file of a message: its blob reference and facts, never its bytes
    (read them at ``/v1/threads/{thread_id}/blobs/{ref}``)."""

    kind: str
    ref: str
    media_type: str
    size: int
    width: int = 0
    height: int = 0
    name: str | None = None
    text: str | None = None


class AdmissionOut(BaseModel):
    """An input is durable: ``duplicate`` when its Idempotency-Key was seen before."""

    input_id: int
    thread_id: str
    duplicate: bool
    #: a running slice was cancelled for this input (strategy interrupt or rollback)
    interrupted: bool = False


class ToolCallOut(BaseModel):
    """A tool call of an assistant message; ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str


class MessageOut(BaseModel):
    """One message of a thread's history; ``seq`` numbers it (and is its event id).

    An assistant message also has the server's ``finish_reason`` (``cut``: the output cap
    cut it, ``finish_reason`` ``"length"``), the model's ``reasoning`` (kept apart from
    ``content``) and the ``usage`` of the call(s) that wrote it, when the server sent them.
    """

    seq: int
    role: str
    content: str
    tool_calls: list[ToolCallOut] = []
    tool_call_id: str | None = None
    name: str | None = None
    created_at: float
    finish_reason: str | None = None
    cut: bool = False
    reasoning: str | None = None
    usage: UsageOut | None = None
    parts: list[PartOut] = []

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        """The wire form of ``message``."""
        return cls(
            seq=message.seq,
            role=message.role,
            content=message.content,
            tool_calls=[ToolCallOut(id=c.id, name=c.name, arguments=c.arguments) for c in message.tool_calls],
            tool_call_id=message.tool_call_id,
            name=message.name,
            created_at=message.created_at,
            finish_reason=message.finish_reason,
            cut=message.cut,
            reasoning=message.reasoning,
            usage=UsageOut.of(message.usage) if message.usage is not None else None,
            parts=[PartOut(**msgspec.structs.asdict(p)) for p in message.parts],
        )


class PrunedOut(BaseModel):
    """What a retention policy deleted of a thread's history."""

    messages: int = Field(description="messages deleted, in all")
    up_to_seq: int = Field(description="every message up to this seq is gone")
    policy: str = Field(description="the retention policy that deleted them (the last one)")
    pruned_at: float = Field(description="when it last did, in seconds since the epoch")


class MessagePage(BaseModel):
    """One page of messages; pass ``next_cursor`` back as ``cursor`` for the next.
    ``pruned`` says what a retention policy deleted of the thread's history (null: nothing;
    by default nothing is ever deleted)."""

    items: list[MessageOut]
    next_cursor: str | None
    pruned: PrunedOut | None = None


class ToolResultIn(Body):
    """The answer to an open async tool call."""

    content: str
    is_error: bool = False


class StatusOut(BaseModel):
    """The caller's tenant's counts (never the whole store's)."""

    threads_by_status: dict[str, int]
    threads_ready: int
    threads_leased: int
    backlog_by_priority: dict[str, int]
    outbox_by_status: dict[str, int]
    dead_letters: int
    messages: int
    schema_version: int
    #: model tokens summed over the tenant's threads (prompt, completion, cached)
    usage: dict[str, int] = {}
    #: threads waiting on a model endpoint that is down, and the latest time one waits until
    threads_waiting: int = 0
    waiting_until: float | None = None

    @classmethod
    def of(cls, status: StoreStatus) -> StatusOut:
        """The wire form of ``status``."""
        return cls(
            threads_by_status=status.threads_by_status,
            threads_ready=status.threads_ready,
            threads_leased=status.threads_leased,
            backlog_by_priority=status.backlog_by_priority,
            outbox_by_status=status.outbox_by_status,
            dead_letters=status.dead_letters,
            messages=status.messages,
            schema_version=status.schema_version,
            usage=status.usage,
            threads_waiting=status.threads_waiting,
            waiting_until=status.waiting_until if status.threads_waiting else None,
        )


class Health(BaseModel):
    """``/healthz`` and ``/readyz``."""

    status: str
    detail: str | None = None
