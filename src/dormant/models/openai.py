"""OpenAIChatModel: a :class:`~dormant.models.base.Model` for OpenAI-compatible servers.

It speaks the Chat Completions protocol (``POST {base_url}/chat/completions`` with
``stream: true``) over :class:`httpx.AsyncClient` directly, so it works with any
server that implements that protocol (OpenAI, vLLM, llama.cpp, Ollama, ...).

Failures are always :class:`~dormant.errors.ModelError`; httpx exceptions never
escape. Rate limits (429), server errors (5xx, 408) and transport failures are
retried with capped exponential backoff, honouring ``Retry-After``, but only
before the first event has been yielded: once a reply is streaming, a failure
raises ``ModelError(retryable=True)`` and the caller discards the partial turn.
"""

from __future__ import annotations

import asyncio
import email.utils
import os
import random
import time
from collections.abc import AsyncIterator, Iterator
from types import TracebackType
from typing import Any

import httpx
import msgspec

from ..errors import ModelError
from ..records import Message
from ..tokens import encoding_for_model
from .base import OPENAI_CHAT, ModelEvent, ModelRequest, TextDelta, ToolCallDelta, check_limits

__all__ = ["OpenAIChatModel"]

#: Upper bound of one backoff delay, and of a ``Retry-After`` the model waits out itself.
MAX_BACKOFF = 20.0
#: Largest SSE line (or non-streamed body) accepted from the server.
MAX_LINE_BYTES = 8 * 1024 * 1024
#: How much of an error body is read to build an error message.
MAX_ERROR_BODY = 64 * 1024

_RETRY_STATUS = frozenset({408, 429})

#: How a compaction summary is introduced to the model (a second system message).
SUMMARY_PREFIX = "Summary of the earlier part of this conversation (older messages are not shown):\n"


class _Retry(Exception):
    """Internal: a failure that may be retried if no event has been yielded yet."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = retry_after


class OpenAIChatModel:
    """A model served by an OpenAI-compatible Chat Completions endpoint.

    ``api_key`` defaults to the environment variable ``DORMANT_API_KEY``, then
    ``OPENAI_API_KEY``; without a key no ``Authorization`` header is sent. A
    ``client`` passed in is used as is and not closed by :meth:`aclose`;
    otherwise the model creates its own client on first use.

    The declared budget: ``context_window`` (default 128,000 tokens),
    ``max_output_tokens`` kept for the reply (default 4,096, or half a smaller
    window; it is not sent to the server) and the token ``encoding``, by default
    the one the model name implies (:func:`dormant.tokens.encoding_for_model`).
    """

    #: the chat format's token overhead, counted by the prompt budget (``SUMMARY_PREFIX`` within it)
    chat_overhead = OPENAI_CHAT

    def __init__(
        self,
        *,
        model: str,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 4,
        backoff: float = 0.5,
        context_window: int = 128_000,
        max_output_tokens: int | None = None,
        encoding: str | None = None,
        temperature: float | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        if backoff < 0:
            raise ValueError("backoff must be >= 0")
        self.name = model
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        if api_key is None:
            api_key = os.environ.get("DORMANT_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._api_key = api_key or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.context_window, self.max_output_tokens, self.encoding = check_limits(
            context_window, max_output_tokens, encoding or encoding_for_model(model)
        )
        self.temperature = temperature
        self._client = client
        self._owns_client = client is None

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.name!r}, base_url={self.base_url!r})"

    async def __aenter__(self) -> OpenAIChatModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this model created it (an injected one is left open)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=httpx.Timeout(self.timeout))
            self._owns_client = True
        return self._client

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (exposed for inspection and tests)."""
        messages: list[dict[str, Any]] = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        if request.summary:
            messages.append({"role": "system", "content": SUMMARY_PREFIX + request.summary})
        messages.extend(_convert(message) for message in request.messages)
        body: dict[str, Any] = {"model": self.name, "messages": messages, "stream": True}
        if request.tools:
            body["tools"] = list(request.tools)
        if self.temperature is not None:
            body["temperature"] = self.temperature
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the reply to ``request`` as text and tool-call pieces.

        Raises :class:`ModelError`: ``retryable=False`` for a refused request
        (4xx other than 408/429) or a malformed reply, ``retryable=True`` when
        retries are exhausted or the stream broke after events were yielded.
        """
        content = msgspec.json.encode(self.request_body(request))
        headers = self._headers()
        attempt = 0
        while True:
            yielded = False
            failure: _Retry
            cause: BaseException | None = None
            try:
                async with self._http().stream(
                    "POST", self.url, content=content, headers=headers, timeout=self.timeout
                ) as response:
                    await _check_status(response)
                    async for event in _events(response):
                        yielded = True
                        yield event
                    return
            except _Retry as exc:
                if yielded:
                    raise ModelError(f"model stream broke: {exc.message}", retryable=True) from exc
                failure = cause = exc
            except httpx.TransportError as exc:
                message = _describe(exc)
                if isinstance(exc, httpx.UnsupportedProtocol):
                    raise ModelError(f"model request failed: {message}", retryable=False) from exc
                if yielded:
                    raise ModelError(f"model stream broke: {message}", retryable=True) from exc
                failure, cause = _Retry(message), exc
            except httpx.HTTPError as exc:
                raise ModelError(f"model request failed: {_describe(exc)}", retryable=True) from exc
            except httpx.InvalidURL as exc:
                raise ModelError(f"invalid model URL {self.url!r}: {exc}", retryable=False) from exc

            delay = self._delay(attempt, failure.retry_after)
            if attempt >= self.max_retries or (
                failure.retry_after is not None and failure.retry_after > MAX_BACKOFF
            ):
                raise ModelError(
                    f"model request failed after {attempt + 1} attempt(s): {failure.message}",
                    retryable=True,
                    retry_after=delay,
                ) from cause
            await asyncio.sleep(delay)
            attempt += 1

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        if retry_after is not None:
            return max(retry_after, 0.0)
        delay = self.backoff * (2.0**attempt)
        delay += random.uniform(0.0, 0.1 * delay)
        return min(delay, MAX_BACKOFF)


def _convert(message: Message) -> dict[str, Any]:
    """One history message in Chat Completions form."""
    if message.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            out["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        return out
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id or "",
            "content": message.content,
        }
    return {"role": "user", "content": message.content}


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds asked for by ``Retry-After`` / ``retry-after-ms``, or None."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


async def _read_capped(response: httpx.Response, limit: int) -> bytes:
    data = bytearray()
    async for chunk in response.aiter_bytes():
        data += chunk
        if len(data) >= limit:
            break
    return bytes(data[:limit])


def _error_message(body: bytes) -> str:
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


async def _check_status(response: httpx.Response) -> None:
    """Raise for an unsuccessful response: :class:`_Retry` or a final :class:`ModelError`."""
    status = response.status_code
    if 200 <= status < 300:
        return
    body = await _read_capped(response, MAX_ERROR_BODY)
    detail = _error_message(body) or response.reason_phrase
    message = f"HTTP {status}: {detail}"
    if status in _RETRY_STATUS or status >= 500:
        raise _Retry(message, retry_after=_retry_after(response.headers))
    raise ModelError(f"model request refused: {message}", retryable=False)


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


async def _events(response: httpx.Response) -> AsyncIterator[ModelEvent]:
    """Parse a successful response: an SSE stream, or a whole JSON completion."""
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("application/json"):
        body = await _read_capped(response, MAX_LINE_BYTES + 1)
        if len(body) > MAX_LINE_BYTES:
            raise ModelError(f"model reply exceeds {MAX_LINE_BYTES} bytes", retryable=False)
        for event in _completion_events(_decode_chunk(body.decode("utf-8", "replace"))):
            yield event
        return

    finished = False  # a choice reported its finish_reason
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
            for event in _chunk_events(chunk):
                yield event
            finished = finished or _has_finish(chunk)
        if done:
            return
    chunks, done = _dispatch(data)  # an event cut short of its blank line
    for chunk in chunks:
        for event in _chunk_events(chunk):
            yield event
        finished = finished or _has_finish(chunk)
    if not (done or finished):
        raise _Retry("stream ended before [DONE]")


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


def _error_in(chunk: Any) -> None:
    if isinstance(chunk, dict) and chunk.get("error"):
        raise ModelError(
            f"model server error in stream: {_error_message(msgspec.json.encode(chunk))}",
            retryable=True,
        )


def _first_choice(chunk: Any) -> dict[str, Any] | None:
    if not isinstance(chunk, dict):
        raise ModelError(f"unexpected model stream chunk: {chunk!r:.200}", retryable=True)
    _error_in(chunk)
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices:
        return None  # e.g. a usage-only chunk
    first = choices[0]
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            first = choice
            break
    return first if isinstance(first, dict) else None


def _has_finish(chunk: Any) -> bool:
    choice = _first_choice(chunk)
    return choice is not None and bool(choice.get("finish_reason"))


def _chunk_events(chunk: Any) -> Iterator[ModelEvent]:
    """Events of one streamed ``chat.completion.chunk``."""
    choice = _first_choice(chunk)
    if choice is None:
        return
    delta = choice.get("delta")
    if isinstance(delta, dict):
        yield from _message_events(delta)


def _completion_events(body: Any) -> Iterator[ModelEvent]:
    """Events of a whole (non-streamed) ``chat.completion``, for servers that ignore ``stream``."""
    choice = _first_choice(body)
    if choice is None:
        raise ModelError("model reply has no choices", retryable=True)
    message = choice.get("message")
    if isinstance(message, dict):
        yield from _message_events(message)


def _message_events(delta: dict[str, Any]) -> Iterator[ModelEvent]:
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
