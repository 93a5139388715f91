"""The model interface: an async stream of events for one completion.

A slice collects the stream into a turn buffer (:func:`collect`) and commits
nothing until the reply is whole, so a stream that fails half-way leaves
nothing half-written.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..errors import ModelError, UsageError
from ..records import CUT as CUT
from ..records import Message, ToolCall
from ..records import Usage as Usage
from ..tokens import check_encoding

#: Tokens kept for a reply unless a model says otherwise (capped at half a small window).
DEFAULT_MAX_OUTPUT = 4_096
#: Most characters of one reply (answer, reasoning and tool-call arguments together) a
#: turn buffer holds; a reply continued after a cut is held to it as a whole.
MAX_REPLY_BYTES = 4 * 1024 * 1024


class ChatOverhead(msgspec.Struct, frozen=True, kw_only=True):
    """What a model adapter's chat format costs besides the text it carries, in tokens.

    The prompt budget (:mod:`dormant.view.budget`) counts these for every request; an adapter
    declares its own as a ``chat_overhead`` attribute (models without one are taken to
    use :data:`OPENAI_CHAT`). A stored message count already includes
    :data:`dormant.tokens.MESSAGE_OVERHEAD` a message: a format that costs more a message
    has the difference reserved for every message a view may hold.
    """

    #: framing of one message (``<|start|>role<|message|>...<|end|>`` besides the role)
    message: int = 3
    #: priming of the reply, once per request (``<|start|>assistant<|message|>``)
    reply: int = 3
    #: what the adapter adds to the summary's text when it sends it (a bound, in tokens)
    summary: int = 0


#: OpenAI-style Chat Completions: 3 tokens a message, 3 for the reply, and what the
#: adapter adds around the summary (:func:`dormant.models.wire.wire_messages`): a fixed
#: prefix inside the one system message, and for a strict template the one user message
#: it may put first (UTF-8 bytes bound their tokens; checked by tests/unit/test_budget.py).
OPENAI_CHAT = ChatOverhead(message=3, reply=3, summary=128)


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One completion request: system prompt, bounded view, tool schemas."""

    thread_id: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    #: the compaction summary of the history before ``messages``; the adapter decides its
    #: form (the OpenAI adapter puts it inside the one system message)
    summary: str | None = None
    #: reads the bytes of a content part's blob by its reference (a
    #: :data:`~dormant.parts.render.BlobFetch`) when the view holds images or files; the
    #: adapter reads them when it builds the request body and drops them after
    blobs: Any = None


class TextDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of assistant text."""

    text: str


class ReasoningDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of the model's reasoning (``reasoning_content`` / ``reasoning``): kept apart
    from the answer (stored on the assistant message) and not shown back to the model
    unless the adapter's dialect asks for it."""

    text: str


class Finish(msgspec.Struct, frozen=True, kw_only=True):
    """The end of a reply: the server's ``finish_reason`` and, if it sent it, the usage."""

    reason: str | None = None
    usage: Usage | None = None


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of tool call number ``index``; id and name arrive in the first piece."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


ModelEvent = TextDelta | ToolCallDelta | ReasoningDelta | Finish


class ModelReply(msgspec.Struct, frozen=True, kw_only=True):
    """A whole assistant reply.

    ``finish_reason`` is the server's (``"stop"``, ``"tool_calls"``, ``"length"`` when
    the output cap cut the reply, see :attr:`cut`), or None when it sent none;
    ``reasoning`` is the model's reasoning text, apart from the answer; ``usage`` the
    server's token counts, when it sent them.
    """

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str | None = None
    reasoning: str = ""
    usage: Usage | None = None

    @property
    def cut(self) -> bool:
        """Whether the output cap cut this reply short."""
        return self.finish_reason == CUT

    def then(self, more: ModelReply) -> ModelReply:
        """This (cut) reply continued by ``more``: the texts and reasonings joined, the
        usages summed; ``more``'s tool calls and finish reason (still ``"length"`` if
        the continuation was cut too)."""
        usage = self.usage
        if more.usage is not None:
            usage = more.usage if usage is None else usage + more.usage
        return ModelReply(
            text=self.text + more.text,
            tool_calls=more.tool_calls,
            finish_reason=more.finish_reason,
            reasoning=self.reasoning + more.reasoning,
            usage=usage,
        )


@runtime_checkable
class Model(Protocol):
    """Anything that streams a completion. Raises :class:`ModelError` on failure.

    A model also declares the budget a prompt must fit: ``context_window`` tokens in
    all, of which ``max_output_tokens`` are kept for the reply, counted in the
    token ``encoding`` (a name from :data:`dormant.tokens.ENCODINGS`).
    """

    name: str

    @property
    def context_window(self) -> int:
        """Tokens the model accepts in one request, prompt and reply together."""
        ...

    @property
    def max_output_tokens(self) -> int:
        """Tokens kept free in the window for the reply."""
        ...

    @property
    def encoding(self) -> str:
        """The token encoding prompts are counted in, e.g. ``"o200k_base"``."""
        ...

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the reply to ``request``."""
        ...


def check_limits(context_window: int, max_output_tokens: int | None, encoding: str) -> tuple[int, int, str]:
    """Validate a model's declared budget; returns ``(context_window, max_output_tokens, encoding)``.

    ``max_output_tokens=None`` means :data:`DEFAULT_MAX_OUTPUT`, or half the window
    if that is smaller. Raises :class:`UsageError` unless ``0 < max_output_tokens <
    context_window`` and ``encoding`` is a known token encoding.
    """
    if context_window < 2:
        raise UsageError(f"context_window must be at least 2 tokens, not {context_window}")
    if max_output_tokens is None:
        max_output_tokens = min(DEFAULT_MAX_OUTPUT, context_window // 2)
    if not 0 < max_output_tokens < context_window:
        raise UsageError(
            f"max_output_tokens must be > 0 and < context_window ({context_window}), not {max_output_tokens}"
        )
    return context_window, max_output_tokens, check_encoding(encoding)


async def collect(
    events: AsyncIterator[ModelEvent],
    *,
    max_bytes: int = MAX_REPLY_BYTES,
    on_piece: Callable[[], object] | None = None,
) -> ModelReply:
    """The turn buffer: gather a stream into a :class:`ModelReply`, bounded by ``max_bytes``
    (answer, reasoning and tool-call arguments together). ``on_piece`` is called as each
    event arrives (a deadline that moves with the stream), with no generator in between.

    A tool call that arrives without an id gets a fresh one (``call_`` and 24 hex digits);
    one without a name raises :class:`ModelError`.
    """
    text: list[str] = []
    reasoning: list[str] = []
    size = 0
    calls: dict[int, list[str]] = {}
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    finish: Finish | None = None
    async for event in events:
        if on_piece is not None:
            on_piece()
        kind = type(event)  # exact type checks: this loop runs per streamed piece
        if kind is TextDelta:
            piece = event.text  # type: ignore[union-attr]
            text.append(piece)
            size += len(piece)
        elif kind is ToolCallDelta:
            assert isinstance(event, ToolCallDelta)
            calls.setdefault(event.index, []).append(event.arguments)
            size += len(event.arguments)
            if event.id:
                ids[event.index] = event.id
            if event.name:
                names[event.index] = event.name
        elif kind is ReasoningDelta:
            assert isinstance(event, ReasoningDelta)
            reasoning.append(event.text)
            size += len(event.text)
        else:
            assert isinstance(event, Finish)
            finish = Finish(
                reason=event.reason or (finish.reason if finish else None),
                usage=event.usage or (finish.usage if finish else None),
            )
        if size > max_bytes:
            raise ModelError(f"model reply exceeds {max_bytes} bytes", retryable=False)
    tool_calls = []
    for index in sorted(calls):
        if index not in names:
            raise ModelError(f"tool call {index} in the stream has no name")
        call_id = ids.get(index) or f"call_{os.urandom(12).hex()}"
        tool_calls.append(ToolCall(id=call_id, name=names[index], arguments="".join(calls[index])))
    return ModelReply(
        text="".join(text),
        tool_calls=tuple(tool_calls),
        finish_reason=finish.reason if finish else None,
        reasoning="".join(reasoning),
        usage=finish.usage if finish else None,
    )


def last_is_tool_result(messages: Sequence[Message]) -> bool:
    """Whether the newest message of a view is a tool result."""
    return bool(messages) and messages[-1].role == "tool"
