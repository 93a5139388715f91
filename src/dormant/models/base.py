"""The model interface: an async stream of events for one completion.

A slice collects the stream into a turn buffer (:func:`collect`) and commits
nothing until the reply is whole, so a stream that fails half-way leaves
nothing half-written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..errors import ModelError
from ..records import Message, ToolCall


class ModelRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One completion request: system prompt, bounded view, tool schemas."""

    thread_id: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()


class TextDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of assistant text."""

    text: str


class ToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of tool call number ``index``; id and name arrive in the first piece."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


ModelEvent = TextDelta | ToolCallDelta


class ModelReply(msgspec.Struct, frozen=True, kw_only=True):
    """A whole assistant reply."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()


@runtime_checkable
class Model(Protocol):
    """Anything that streams a completion. Raises :class:`ModelError` on failure."""

    name: str
    context_window: int

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the reply to ``request``."""
        ...


async def collect(events: AsyncIterator[ModelEvent], *, max_bytes: int = 4 * 1024 * 1024) -> ModelReply:
    """The turn buffer: gather a stream into a :class:`ModelReply`, bounded by ``max_bytes``."""
    text: list[str] = []
    size = 0
    calls: dict[int, list[str]] = {}
    ids: dict[int, str] = {}
    names: dict[int, str] = {}
    async for event in events:
        if type(event) is TextDelta:  # exact type check: this loop runs per streamed piece
            piece = event.text
            text.append(piece)
            size += len(piece)
        else:
            assert isinstance(event, ToolCallDelta)
            calls.setdefault(event.index, []).append(event.arguments)
            size += len(event.arguments)
            if event.id:
                ids[event.index] = event.id
            if event.name:
                names[event.index] = event.name
        if size > max_bytes:
            raise ModelError(f"model reply exceeds {max_bytes} bytes", retryable=False)
    tool_calls = []
    for index in sorted(calls):
        if index not in ids or index not in names:
            raise ModelError(f"tool call {index} in the stream has no id or name")
        tool_calls.append(ToolCall(id=ids[index], name=names[index], arguments="".join(calls[index])))
    return ModelReply(text="".join(text), tool_calls=tuple(tool_calls))


def last_is_tool_result(messages: Sequence[Message]) -> bool:
    """Whether the newest message of a view is a tool result."""
    return bool(messages) and messages[-1].role == "tool"
