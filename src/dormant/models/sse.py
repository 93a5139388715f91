"""Parsing a Chat Completions reply: a server-sent event stream, or a whole JSON body.

Pure parsing over an :class:`httpx.Response`; the HTTP loop and retries are in
:mod:`dormant.models.openai`. A stream must end with ``[DONE]`` or a
``finish_reason``: one that stops before either raises :class:`Retry` (a reply cut
short is never taken for a whole one). A ``content_filter`` finish or a
``refusal`` is raised as ``ModelError(kind="refused")``, never returned as an answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import msgspec

from ..errors import ModelError
from .base import Finish, ModelEvent, ReasoningDelta, TextDelta, ToolCallDelta, Usage

#: Largest SSE line (or non-streamed body) accepted from the server.
MAX_LINE_BYTES = 8 * 1024 * 1024
#: Most refusal text kept for the error message.
MAX_REFUSAL = 2_000


class Retry(Exception):
    """A failure that may be retried if no event has been yielded yet.

    ``outage``: the endpoint itself failed (transport error, 5xx), which counts
    against its circuit breaker; a rate limit or a cut stream does not.
    """

    def __init__(self, message: str, *, retry_after: float | None = None, outage: bool = False) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after
        self.outage = outage


async def read_capped(response: httpx.Response, limit: int) -> bytes:
    """At most ``limit`` bytes of ``response``'s body."""
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit])


def error_message(body: bytes) -> str:
    """The server's error message from an error body (OpenAI form or otherwise)."""
    try:
        payload = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body.decode("utf-8", "replace").strip()[:1000]
    if isinstance(payload, dict):
        error = payload.get("error", payload)
        if isinstance(error, dict):
            for key in ("message", "detail", "error"):
                value = error.get(key)
                if isinstance(value, str) and value:
                    return value
        elif isinstance(error, str) and error:
            return error
    return body.decode("utf-8", "replace").strip()[:1000]


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    """The body's lines (``\\n`` or ``\\r\\n`` separated), each at most MAX_LINE_BYTES."""
    buffer = ""
    async for text in response.aiter_text():
        buffer += text
        while True:
            end = buffer.find("\n")
            if end < 0:
                break
            line, buffer = buffer[:end], buffer[end + 1 :]
            yield line.removesuffix("\r")
        if len(buffer) > MAX_LINE_BYTES:
            raise ModelError(f"model stream line exceeds {MAX_LINE_BYTES} bytes", retryable=False)
    if buffer:
        yield buffer.removesuffix("\r")


def _decode_chunk(data: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise ModelError(f"malformed JSON in model stream: {data[:200]!r}", retryable=True) from exc


class _Reply:
    """What a stream has said so far that decides how it ends."""

    __slots__ = ("finished", "refusal")

    def __init__(self) -> None:
        self.finished = False
        self.refusal: list[str] = []

    def chunk(self, chunk: Any, *, whole: bool = False) -> Iterator[ModelEvent]:
        """Events of one ``chat.completion.chunk`` (or, ``whole``, a ``chat.completion``)."""
        choice = _first_choice(chunk)
        usage = _usage(chunk)
        reason = None
        if choice is not None:
            delta = choice.get("message" if whole else "delta")
            if isinstance(delta, dict):
                yield from _message_events(delta)
                refusal = delta.get("refusal")
                if isinstance(refusal, str) and refusal and sum(map(len, self.refusal)) < MAX_REFUSAL:
                    self.refusal.append(refusal)
            value = choice.get("finish_reason")
            reason = value if isinstance(value, str) and value else None
        if reason is not None:
            self.finished = True
            self.check(reason)
        if reason is not None or usage is not None:
            yield Finish(reason=reason, usage=usage)

    def check(self, reason: str | None = None) -> None:
        """Raise ``ModelError(kind="refused")`` for a filtered or refused reply."""
        if reason == "content_filter":
            raise ModelError(
                "the model server's content filter stopped the reply (finish_reason content_filter)",
                retryable=False,
                kind="refused",
            )
        if self.refusal and (reason is not None or not self.finished):
            text = "".join(self.refusal)[:MAX_REFUSAL]
            raise ModelError(f"the model refused to answer: {text}", retryable=False, kind="refused")


async def events(response: httpx.Response) -> AsyncIterator[ModelEvent]:
    """Parse a successful response: an SSE stream, or a whole JSON completion."""
    reply = _Reply()
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        body = await read_capped(response, MAX_LINE_BYTES + 1)
        if len(body) > MAX_LINE_BYTES:
            raise ModelError(f"model reply exceeds {MAX_LINE_BYTES} bytes", retryable=False)
        completion = _decode_chunk(body.decode("utf-8", "replace"))
        if _first_choice(completion) is None:
            raise ModelError("model reply has no choices", retryable=True)
        for event in reply.chunk(completion, whole=True):
            yield event
        reply.check()
        return

    data: list[str] = []
    async for line in _lines(response):
        if line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
            continue
        if line or not data:
            continue  # a comment (": ..."), another field, or a blank line between events
        chunks, done = _dispatch(data)
        data = []
        for chunk in chunks:
            for event in reply.chunk(chunk):
                yield event
        if done:
            reply.check()
            return
    chunks, done = _dispatch(data)  # an event cut short of its blank line
    for chunk in chunks:
        for event in reply.chunk(chunk):
            yield event
    if not (done or reply.finished):
        raise Retry("stream ended before [DONE]")
    reply.check()


def _dispatch(data: list[str]) -> tuple[list[Any], bool]:
    """The JSON chunks of one SSE event's data lines, and whether ``[DONE]`` was among them."""
    if not data:
        return [], False
    if len(data) > 1:
        try:
            return [msgspec.json.decode("\n".join(data))], False
        except msgspec.DecodeError:
            pass  # a non-conforming server left out the blank lines between events
    pieces = [piece for piece in data if piece.strip() != "[DONE]"]
    return [_decode_chunk(piece) for piece in pieces], len(pieces) < len(data)


def _first_choice(chunk: Any) -> dict[str, Any] | None:
    if not isinstance(chunk, dict):
        raise ModelError(f"unexpected model stream chunk: {chunk!r:.200}", retryable=True)
    if chunk.get("error"):
        raise ModelError(
            f"model server error in stream: {error_message(msgspec.json.encode(chunk))}",
            retryable=True,
        )
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return None  # e.g. a usage-only chunk
    first = choices[0]
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            first = choice
            break
    return first if isinstance(first, dict) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _usage(chunk: dict[str, Any]) -> Usage | None:
    """The ``usage`` of a chunk (OpenAI, vLLM, llama.cpp form), or None."""
    usage = chunk.get("usage")
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else usage.get("cached_tokens")
    return Usage(
        prompt=_int(usage.get("prompt_tokens")),
        completion=_int(usage.get("completion_tokens")),
        cached=_int(cached),
    )


def _message_events(delta: dict[str, Any]) -> Iterator[ModelEvent]:
    for key in ("reasoning_content", "reasoning"):
        reasoning = delta.get(key)
        if isinstance(reasoning, str) and reasoning:
            yield ReasoningDelta(text=reasoning)
            break
    content = delta.get("content")
    if isinstance(content, str) and content:
        yield TextDelta(text=content)
    tool_calls = delta.get("tool_calls")
    if not isinstance(tool_calls, list):
        return
    for position, piece in enumerate(tool_calls):
        if not isinstance(piece, dict):
            continue
        index = piece.get("index")
        if not isinstance(index, int):
            index = position
        function = piece.get("function")
        if not isinstance(function, dict):
            function = {}
        call_id = piece.get("id")
        name = function.get("name")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = msgspec.json.encode(arguments).decode()
        yield ToolCallDelta(
            index=index,
            id=call_id if isinstance(call_id, str) and call_id else None,
            name=name if isinstance(name, str) and name else None,
            arguments=arguments if isinstance(arguments, str) else "",
        )
