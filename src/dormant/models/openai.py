"""OpenAIChatModel: a :class:`~dormant.models.base.Model` for OpenAI-compatible servers.

It speaks the Chat Completions protocol (``POST {base_url}/chat/completions`` with
``stream: true``) over :class:`httpx.AsyncClient` directly, so it works with any
server that implements that protocol (OpenAI, vLLM, llama.cpp, Ollama, ...). What a
server's chat template accepts is its :class:`~dormant.models.wire.Dialect`.

Failures are always :class:`~dormant.errors.ModelError`; httpx exceptions never
escape. Rate limits (429, 408), server errors (5xx) and transport failures are
retried with capped exponential backoff, honouring ``Retry-After``, but only
before the first event has been yielded: once a reply is streaming, a failure
raises ``ModelError(retryable=True)`` and the caller discards the partial turn.
Transport failures and 5xx also count against the endpoint's process-wide circuit
breaker (:mod:`dormant.models.breaker`): while it is open, calls fail fast with
``ModelError(kind="outage")``. A 400 that says the prompt is too long is
``ModelError(kind="context_overflow")``.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import os
import random
import re
import time
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import TracebackType
from typing import Any

import httpx
import msgspec

from ..errors import ModelError
from ..parts import budget as part_budget
from ..parts.render import inline_bytes, resolve
from ..tokens import encoding_for_model, tokenizer_encoding
from .base import OPENAI_CHAT, ModelEvent, ModelRequest, check_limits
from .breaker import CircuitBreaker, breaker_for
from .server import PROBE_TIMEOUT_S, ServerInfo, probe
from .sse import MAX_LINE_BYTES, Retry, error_message, events, read_capped
from .wire import SUMMARY_PREFIX, Dialect, dialect_for, wire_messages

__all__ = ["SUMMARY_PREFIX", "OpenAIChatModel", "redact"]

log = logging.getLogger("dormant.models")

#: Upper bound of one backoff delay, and of a ``Retry-After`` the model waits out itself.
MAX_BACKOFF = 20.0
#: How much of an error body is read to build an error message.
MAX_ERROR_BODY = 64 * 1024
assert MAX_ERROR_BODY < MAX_LINE_BYTES

_RETRY_STATUS = frozenset({408, 429})
#: Body fields the adapter owns; ``extra_body`` may not replace them.
_OWN_FIELDS = frozenset({"model", "messages", "stream", "tools"})
#: How servers say a prompt is longer than the model's window (OpenAI, vLLM, llama.cpp, ...).
_OVERFLOW = re.compile(
    r"context[ _-]?(length|size|window)|maximum context|too many tokens|prompt is too long"
    r"|input is too long|exceeds? the (available )?context",
    re.IGNORECASE,
)


def redact(url: str) -> str:
    """``url`` without credentials (user info, and query values such as ``api-key``)."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        netloc = "***@" + netloc.rsplit("@", 1)[1]
    query = "&".join(f"{pair.split('=', 1)[0]}=***" for pair in parts.query.split("&") if pair)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc, query=query))


class OpenAIChatModel:
    """A model served by an OpenAI-compatible Chat Completions endpoint.

    ``api_key`` defaults to the environment variable ``DORMANT_API_KEY``, then
    ``OPENAI_API_KEY``; without a key no ``Authorization`` header is sent. A
    ``client`` passed in is used as is and not closed by :meth:`aclose`;
    otherwise the model creates its own client on first use.

    The declared budget: ``context_window`` (default 128,000 tokens),
    ``max_output_tokens`` kept for the reply (default 4,096, or half a smaller
    window), sent as the output cap in the dialect's field, and the token
    ``encoding``, by default the one the model name implies
    (:func:`dormant.tokens.encoding_for_model`).

    ``dialect``: a name from :data:`~dormant.models.wire.DIALECTS` (``"auto"``:
    ``openai`` for api.openai.com, else ``generic``) or a
    :class:`~dormant.models.wire.Dialect`. ``extra_body``: further request fields
    passed through as given (``response_format``, ``seed``, ``stop``,
    ``tool_choice``, ``parallel_tool_calls``, ``reasoning_effort``, ...); it may not
    replace ``model``, ``messages``, ``stream`` or ``tools``.
    ``breaker``: the endpoint's circuit breaker (default: the process-wide one of
    ``base_url``).

    ``tokenizer``: how prompts are counted (:func:`dormant.tokens.tokenizer_encoding`):
    ``"auto"`` (default) counts in ``encoding`` and :attr:`learns_tokens` (the budget
    learns the model's own tokens against that count from each reply's usage); an
    encoding name; a path to the model's Hugging Face ``tokenizer.json``; or
    ``"server"``, the server's own ``POST /tokenize``. ``timeout`` bounds connecting and
    sending; ``read_timeout`` (default None) one read of the response: the slice's own
    deadlines (first piece, gap between pieces) govern a streaming reply.
    ``part_budget``: the :class:`~dormant.parts.budget.PartBudget` a request that
    inlines images or files reserves their bytes from (default: the process's).
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
        dialect: str | Dialect = "auto",
        extra_body: Mapping[str, Any] | None = None,
        client: httpx.AsyncClient | None = None,
        breaker: CircuitBreaker | None = None,
        tokenizer: str | None = None,
        read_timeout: float | None = None,
        part_budget: part_budget.PartBudget | None = None,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if timeout <= 0:
            raise ValueError("timeout must be > 0")
        if backoff < 0:
            raise ValueError("backoff must be >= 0")
        if read_timeout is not None and read_timeout <= 0:
            raise ValueError("read_timeout must be > 0 (or None)")
        extra = dict(extra_body or {})
        if _OWN_FIELDS & extra.keys():
            raise ValueError(f"extra_body may not set {sorted(_OWN_FIELDS & extra.keys())}")
        self.name = model
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.url = f"{self.base_url}/chat/completions"
        self.endpoint = redact(self.base_url)
        if api_key is None:
            api_key = os.environ.get("DORMANT_API_KEY") or os.environ.get("OPENAI_API_KEY")
        self._api_key = api_key or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        own = tokenizer_encoding(tokenizer or "auto", self.base_url)
        #: whether the budget learns this model's tokens from the server (no tokenizer of its own)
        self.learns_tokens = own is None and encoding is None
        self.context_window, self.max_output_tokens, self.encoding = check_limits(
            context_window, max_output_tokens, own or encoding or encoding_for_model(model)
        )
        self.read_timeout = read_timeout
        self.temperature = temperature
        self.dialect = dialect_for(dialect, self.base_url)
        self.extra_body = extra
        self.breaker = breaker or breaker_for(self.endpoint)
        self._client = client
        self._owns_client = client is None
        #: the bytes of parts in flight this model's requests reserve from (None: the
        #: process's, :data:`dormant.parts.budget.SHARED`)
        self.part_budget = part_budget

    def __repr__(self) -> str:
        return f"OpenAIChatModel(model={self.name!r}, base_url={self.endpoint!r})"

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
            self._client = httpx.AsyncClient(timeout=self._timeouts())
            self._owns_client = True
        return self._client

    def _timeouts(self) -> httpx.Timeout:
        return httpx.Timeout(self.timeout, read=self.read_timeout)

    async def describe(self) -> ServerInfo:
        """What the server says about itself: its context size and whether its chat
        template renders tools (:func:`dormant.models.server.probe`; never raises)."""
        return await probe(
            self.base_url, self.name, endpoint=self.endpoint, api_key=self._api_key, client=self._client
        )

    async def reachable(self) -> bool:
        """Whether the server's host and port take a TCP connection now (no HTTP request;
        bounded by a second)."""
        parts = urllib.parse.urlsplit(self.base_url)
        host = parts.hostname or "127.0.0.1"
        port = parts.port or (443 if parts.scheme == "https" else 80)
        try:
            async with asyncio.timeout(1.0):
                _, writer = await asyncio.open_connection(host, port)
        except (OSError, TimeoutError):
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    async def healthy(self) -> bool:
        """Whether the server answers ``GET {base_url}/models`` with a success now (a
        cheap check, bounded by a few seconds; llama.cpp answers 503 while loading)."""
        try:
            response = await self._http().get(
                f"{self.base_url}/models", headers=self._headers(), timeout=PROBE_TIMEOUT_S
            )
        except (httpx.HTTPError, httpx.InvalidURL, OSError):
            return False
        return 200 <= response.status_code < 300

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (exposed for inspection and tests)."""
        body: dict[str, Any] = {
            "model": self.name,
            "messages": wire_messages(request, self.dialect),
            "stream": True,
        }
        if self.dialect.stream_usage:
            body["stream_options"] = {"include_usage": True}
        if request.tools:
            body["tools"] = list(request.tools)
        if self.dialect.output_cap:
            body[self.dialect.output_cap] = self.max_output_tokens
        if self.temperature is not None:
            body["temperature"] = self.temperature
        body.update(self.extra_body)
        return body

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Stream the reply to ``request``: text, reasoning and tool-call pieces, then a
        :class:`~dormant.models.base.Finish` with the finish reason and usage.

        Raises :class:`ModelError`: ``retryable=False`` for a refused request (4xx
        other than 408/429; ``kind="context_overflow"`` for a prompt over the
        window, ``kind="refused"`` for a filtered reply) or a malformed reply;
        ``retryable=True`` when retries are exhausted (``kind="outage"`` when the
        endpoint was failing) or the stream broke after events were yielded.
        """
        body = self.request_body(request)
        reserved = 0
        if request.blobs is not None and self.dialect.vision:  # parts' bytes, for this request only
            sizes = {p.ref: p.size for m in request.messages for p in m.parts if p.ref}
            reserved = inline_bytes(body["messages"], sizes)
        if not reserved:
            sent = self._send(msgspec.json.encode(body), request)
            del body
            async with contextlib.aclosing(sent):
                async for event in sent:
                    yield event
            return
        held = self.part_budget or part_budget.SHARED
        # reserved before the bytes are read; given back once the body is dropped: after
        # the reply streamed, an error, or a cancel (the wait counts in the model timeout)
        await held.acquire(reserved)
        buffer = bytearray()
        try:
            media = {p.ref: p.media_type for m in request.messages for p in m.parts}
            await resolve(body["messages"], media, request.blobs)
            _ENCODER.encode_into(body, buffer)
            del body
            sent = self._send(buffer, request)
            async with contextlib.aclosing(sent):
                async for event in sent:
                    yield event
        finally:
            # emptied here, not when the garbage collector gets to httpx's request objects
            # (they sit in reference cycles): the bytes are gone when the budget says so
            buffer.clear()
            held.release(reserved)

    async def _send(
        self, content: bytes | bytearray, request: ModelRequest
    ) -> AsyncGenerator[ModelEvent, None]:
        """POST ``content`` and stream the reply, retrying as :meth:`stream` says. A
        ``bytearray`` is sent in copied pieces (see :func:`_pieces`), so its owner can empty it."""
        headers = self._headers()
        if isinstance(content, bytearray):
            headers["Content-Length"] = str(len(content))
        attempt = 0
        while True:
            self.breaker.check()
            yielded = False
            failure: Retry
            cause: BaseException | None = None
            try:
                async with self._http().stream(
                    "POST",
                    self.url,
                    content=_pieces(content) if isinstance(content, bytearray) else content,
                    headers=headers,
                    timeout=self._timeouts(),
                ) as response:
                    await self._check_status(response)
                    async for event in events(response):
                        yielded = True
                        yield event
                    return
            except Retry as exc:
                if yielded:
                    raise ModelError(f"model stream broke: {exc.message}", retryable=True) from exc
                failure = cause = exc
            except httpx.TransportError as exc:
                message = f"cannot reach {self.endpoint}: {_describe(exc)}"
                if isinstance(exc, httpx.UnsupportedProtocol):
                    raise ModelError(f"model request failed: {message}", retryable=False) from exc
                if yielded:
                    raise ModelError(f"model stream broke: {message}", retryable=True) from exc
                self.breaker.failure(unreachable=isinstance(exc, httpx.ConnectError))
                failure, cause = Retry(message, outage=True), exc
            except httpx.HTTPError as exc:
                raise ModelError(f"model request failed: {_describe(exc)}", retryable=True) from exc
            except httpx.InvalidURL as exc:
                raise ModelError(f"invalid model URL {self.endpoint!r}: {exc}", retryable=False) from exc

            delay = self._delay(attempt, failure.retry_after)
            if attempt >= self.max_retries or (
                failure.retry_after is not None and failure.retry_after > MAX_BACKOFF
            ):
                raise ModelError(
                    f"model request failed after {attempt + 1} attempt(s): {failure.message}",
                    retryable=True,
                    retry_after=delay,
                    kind="outage" if failure.outage else "error",
                ) from cause
            log.info(
                "model_retry thread=%s attempt=%d in=%.2fs: %s",
                request.thread_id,
                attempt + 1,
                delay,
                failure.message,
                extra={"thread_id": request.thread_id, "error": failure.message},
            )
            await asyncio.sleep(delay)
            attempt += 1

    async def _check_status(self, response: httpx.Response) -> None:
        """Raise for an unsuccessful response: :class:`Retry` or a final :class:`ModelError`."""
        status = response.status_code
        if 200 <= status < 300:
            self.breaker.success()
            return
        body = await read_capped(response, MAX_ERROR_BODY)
        detail = error_message(body) or response.reason_phrase
        message = f"HTTP {status}: {detail}"
        if status >= 500:
            self.breaker.failure()
            raise Retry(
                f"{self.endpoint} answered {message}", retry_after=_retry_after(response.headers), outage=True
            )
        self.breaker.success()  # the server is up; it refused or rate-limited this request
        if status in _RETRY_STATUS:
            raise Retry(message, retry_after=_retry_after(response.headers))
        if status == 404:
            raise ModelError(
                f"model request refused: {self.url.replace(self.base_url, self.endpoint)} answered {message} "
                f"(is the base URL right, and is model {self.name!r} served there?)",
                retryable=False,
            )
        if status in (400, 413, 422) and (_OVERFLOW.search(detail) or b"context_length_exceeded" in body):
            raise ModelError(
                f"model request refused, the prompt is over the model's window: {message}",
                retryable=False,
                kind="context_overflow",
            )
        raise ModelError(f"model request refused: {message}", retryable=False)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before retry number ``attempt + 1``."""
        if retry_after is not None:
            return max(retry_after, 0.0)
        delay = self.backoff * (2.0**attempt)
        delay += random.uniform(0.0, 0.1 * delay)
        return min(delay, MAX_BACKOFF)


#: encodes a request body into a buffer the request owns
_ENCODER = msgspec.json.Encoder()
#: bytes of one piece of a body sent from a buffer
PIECE_BYTES = 64 * 1024


async def _pieces(buffer: bytearray) -> AsyncIterator[bytes]:
    """``buffer``'s bytes in copied pieces (a fresh iterator per attempt, so a retry
    sends the whole body again): httpx keeps only the pieces it is writing."""
    for start in range(0, len(buffer), PIECE_BYTES):
        yield bytes(buffer[start : start + PIECE_BYTES])


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
