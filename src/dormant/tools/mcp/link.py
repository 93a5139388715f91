"""One supervised connection to one MCP server, per worker (never per thread).

:class:`ServerLink` starts the server lazily (on the first listing or call), keeps one
SDK :class:`mcp.client.Client` open in a task of its own, and starts it again after it
ends, waiting a backoff that doubles with each failure in a row (up to
:data:`MAX_BACKOFF_S`) and resets once a connection lasted. Calls made while the server
is down wait for it within their own timeout.

A call's timeout is an *idle* timeout: each progress notification restarts it, and
``max_call_s`` caps the whole call. When a call is abandoned (timeout, cancelled
slice) the SDK sends ``notifications/cancelled`` on stdio; on streamable HTTP the
request's stream is closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import mcp_types as types
from mcp.client import Client
from mcp.shared.exceptions import MCPError

from ...errors import ToolError
from .config import DEFAULT_STDERR_BYTES, McpServer
from .stdio import StderrTail, StdioTransport

log = logging.getLogger("dormant.mcp")

#: Longest wait before starting a server again after it failed.
MAX_BACKOFF_S = 30.0
FIRST_BACKOFF_S = 0.5
#: A connection that lasted this long resets the backoff.
HEALTHY_S = 10.0
#: How long a server has to answer a listing after one of its calls timed out.
PING_S = 5.0
#: Most pages of one tool listing followed.
MAX_PAGES = 64


class McpFailure(ToolError):
    """A call could not be made or its outcome is unknown; ``sent`` tells whether the
    request reached the server (then a non-idempotent call must not run again)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message, retryable=not sent)
        self.sent = sent


class ServerLink:
    """The supervised connection to ``config``'s server."""

    def __init__(
        self,
        config: McpServer,
        *,
        on_tools_changed: Callable[[], None] | None = None,
        counters: dict[str, int] | None = None,
    ) -> None:
        self.config = config
        self.stderr = StderrTail(DEFAULT_STDERR_BYTES)
        self.on_tools_changed = on_tools_changed
        #: calls, failures, timeouts, restarts (for metrics and ``dormant mcp list``)
        self.counters = counters if counters is not None else {}
        for key in ("calls", "failures", "timeouts", "starts", "restarts"):
            self.counters.setdefault(key, 0)
        self._client: Client | None = None
        self._ready: asyncio.Event = asyncio.Event()
        self._gone: asyncio.Event = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._failures = 0
        self._next_start = 0.0
        self._transport: StdioTransport | None = None
        self.last_error: str | None = None
        self._aborted: str | None = None

    # -- lifecycle -------------------------------------------------------------------

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._transport = None  # the ended connection's, until the new one makes its own
            self._aborted = None
            self.stderr = StderrTail(DEFAULT_STDERR_BYTES)  # this connection's process only
            self._ready = asyncio.Event()
            self._gone = asyncio.Event()
            self._task = asyncio.create_task(self._connection(), name=f"mcp:{self.config.name}")

    async def _connection(self) -> None:
        """Open one connection and hold it until it ends or :meth:`close`."""
        delay = self._next_start - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        if self._closing:
            self._gone.set()
            return
        started = time.monotonic()
        self.counters["starts"] += 1
        if self.counters["starts"] > 1:
            self.counters["restarts"] += 1
        try:
            async with asyncio.timeout(self.config.start_timeout):
                client = Client(
                    self._transport_cm(),
                    message_handler=self._on_message,
                    cache=None,
                    client_info=types.Implementation(name="dormant", version="0"),
                )
                await client.__aenter__()
        except BaseException as exc:
            self._failed(started, self._reason(exc, "could not start"))
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        try:
            self._client = client
            self._ready.set()
            log.info("mcp_server_started", extra={"server": self.config.name, "pid": self._pid()})
            await self._wait_end()
        finally:
            self._client = None
            self._ready.clear()
            try:
                await client.__aexit__(None, None, None)  # in this task: the SDK's task group is its
            except BaseException as exc:  # the server is gone either way
                log.debug("mcp_client_exit", extra={"server": self.config.name, "error": repr(exc)})
            if not self._closing:
                self._failed(started, self._reason(None, "exited"))
            self._gone.set()

    async def _wait_end(self) -> None:
        while not self._closing and self._aborted is None:
            transport = self._transport
            if transport is not None and transport.ended is not None:
                return
            await asyncio.sleep(0.05)

    def _transport_cm(self) -> Any:
        c = self.config
        if c.command is not None:
            self._transport = StdioTransport(
                c.name,
                c.command,
                c.args,
                dict(c.env),
                c.cwd,
                max_message_bytes=c.max_message_bytes,
                stderr=self.stderr,
            )
            return self._transport.connect()
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        assert c.url is not None
        http = httpx2.AsyncClient(headers=dict(c.headers), timeout=httpx2.Timeout(c.start_timeout, read=None))
        return streamable_http_client(c.url, http_client=http, max_sse_event_size=c.max_message_bytes)

    def _pid(self) -> int | None:
        return self._transport.pid if self._transport is not None else None

    def _failed(self, started: float, reason: str) -> None:
        self.last_error = reason
        if time.monotonic() - started >= HEALTHY_S:
            self._failures = 0
        self._failures += 1
        wait = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (self._failures - 1))
        self._next_start = time.monotonic() + wait
        log.warning(
            "mcp_server_down",
            extra={"server": self.config.name, "reason": reason, "restart_in_s": round(wait, 2)},
        )

    def _reason(self, exc: BaseException | None, what: str, during: str = "") -> str:
        """Why the connection failed or ended, without secrets (no env, no headers)."""
        transport = self._transport
        if self._aborted is not None:
            what = self._aborted
        elif transport is not None and transport.ended:
            what = transport.ended
        parts = [f"MCP server {self.config.name!r} ({self.config.where()}) {what}{during}"]
        if exc is not None and not isinstance(exc, asyncio.CancelledError) and what == "could not start":
            detail = "timed out" if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"
            parts[0] += f" ({_first_line(detail)})"
        if transport is not None and transport.returncode is not None:
            parts.append(f"exit status {transport.returncode}")
        tail = self.stderr.text(300)
        if tail:
            parts.append(f"stderr: {tail}")
        return "; ".join(parts)

    async def _on_message(self, message: Any) -> None:
        method = getattr(message, "method", None) or getattr(getattr(message, "root", None), "method", None)
        if method == "notifications/tools/list_changed" and self.on_tools_changed is not None:
            self.on_tools_changed()

    def _dead(self) -> bool:
        transport = self._transport
        return self._aborted is not None or (transport is not None and transport.ended is not None)

    async def connected(self, timeout: float) -> Client:
        """The open client, starting the server if it is not running (or starting it
        again once a dead connection has ended); raises :class:`McpFailure` (not sent)
        if it is not up within ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            if self._closing:
                raise McpFailure(f"MCP server {self.config.name!r} is shutting down", sent=False)
            if self._client is not None and self._ready.is_set() and not self._dead():
                return self._client
            self._start()
            assert self._task is not None
            left = deadline - time.monotonic()
            if left <= 0:
                break
            waits: set[asyncio.Future[Any]] = {self._task}
            ready = asyncio.ensure_future(self._ready.wait())
            if not self._dead():
                waits.add(ready)
            try:
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            finally:
                ready.cancel()
        why = self.last_error or f"MCP server {self.config.name!r} did not start"
        raise McpFailure(f"{why} (not reachable within {timeout:g}s; the call was not sent)", sent=False)

    def abort(self, reason: str) -> None:
        """End the current connection (a hung server): its calls fail, the next one
        starts the server again after the backoff."""
        self._aborted = reason
        if self._transport is not None:
            self._transport.abort(reason)

    async def _probe(self, client: Client) -> None:
        """After a call timed out: a server that does not list its tools within
        :data:`PING_S` is hung; end it (``ping`` is gone from the current protocol
        revision, a listing works on every one)."""
        try:
            async with asyncio.timeout(PING_S):
                await client.list_tools(cache_mode="refresh")
        except Exception:
            self.abort(f"did not answer within {PING_S:g}s after a call timed out (hung); restarting it")

    async def close(self) -> None:
        """Stop the server (its stdin closed, then killed after a grace period)."""
        self._closing = True
        task, self._task = self._task, None
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=10.0)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    # -- requests --------------------------------------------------------------------

    async def list_tools(self) -> tuple[list[types.Tool], bool]:
        """The server's tools, following ``cursor`` pages, bounded by ``max_tools`` and
        ``max_tools_bytes`` (the rest is dropped and logged). Answers (tools, cut)."""
        c = self.config
        client = await self.connected(c.start_timeout)
        tools: list[types.Tool] = []
        size = 0
        cut = False
        cursor: str | None = None
        for _ in range(MAX_PAGES):
            try:
                async with asyncio.timeout(c.timeout):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
            except TimeoutError:
                raise McpFailure(
                    f"MCP server {c.name!r} did not list its tools within {c.timeout:g}s", sent=True
                ) from None
            except MCPError as exc:
                raise McpFailure(
                    f"MCP server {c.name!r} failed to list its tools: {exc}", sent=True
                ) from None
            for item in page.tools:
                weight = len(item.model_dump_json(by_alias=True, exclude_none=True))
                if len(tools) >= c.max_tools or size + weight > c.max_tools_bytes:
                    cut = True
                    break
                tools.append(item)
                size += weight
            cursor = page.next_cursor
            if cut or not cursor:
                break
        else:
            cut = True
        if cut:
            log.warning(
                "mcp_tools_cut",
                extra={
                    "server": c.name,
                    "kept": len(tools),
                    "max_tools": c.max_tools,
                    "max_bytes": c.max_tools_bytes,
                },
            )
        return tools, cut

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        idle_timeout: float,
        call_id: str | None = None,
        on_progress: Callable[[float, float | None, str | None], Awaitable[None]] | None = None,
    ) -> types.CallToolResult:
        """Call ``tool``; each progress notification restarts ``idle_timeout``.

        Raises :class:`McpFailure`: ``sent=False`` when the request never reached the
        server (it is safe to send again), ``sent=True`` when it did and its outcome is
        unknown (the server exited, hung, or broke the protocol). A JSON-RPC error is a
        :class:`ToolError` with the server's message.
        """
        c = self.config
        client = await self.connected(min(c.start_timeout, c.max_call_s))
        self.counters["calls"] += 1
        last = time.monotonic()

        async def progress(progress: float, total: float | None, message: str | None) -> None:
            nonlocal last
            last = time.monotonic()
            if on_progress is not None:
                await on_progress(progress, total, message)

        started = time.monotonic()
        meta: Any = (
            {"dormant/callId": call_id} if call_id else None
        )  # the idempotency key, for servers that read it
        call = asyncio.ensure_future(client.call_tool(tool, arguments, progress_callback=progress, meta=meta))
        gone = asyncio.ensure_future(self._gone.wait())
        try:
            while True:
                now = time.monotonic()
                left = min(last + idle_timeout, started + c.max_call_s) - now
                if left <= 0:
                    self.counters["timeouts"] += 1
                    call.cancel()  # the SDK sends notifications/cancelled (stdio) or closes the stream
                    await asyncio.gather(call, return_exceptions=True)
                    await self._probe(client)
                    cap = now >= started + c.max_call_s
                    what = (
                        f"ran past {c.max_call_s:g}s"
                        if cap
                        else f"sent no result or progress for {idle_timeout:g}s"
                    )
                    raise McpFailure(
                        f"MCP tool {c.name}/{tool} {what}; it was cancelled, its outcome is unknown",
                        sent=True,
                    )
                await asyncio.wait({call, gone}, timeout=left, return_when=asyncio.FIRST_COMPLETED)
                if call.done():
                    break
                if gone.done() or (self._transport is not None and self._transport.ended):
                    break
            if not call.done():
                raise McpFailure(self._reason(None, "ended the connection", " during the call"), sent=True)
            try:
                return call.result()
            except MCPError as exc:
                transport = self._transport
                ended = self._gone.is_set() or self._aborted or (transport is not None and transport.ended)
                if exc.code == types.CONNECTION_CLOSED and (
                    ended or exc.error.message == "Connection closed"
                ):
                    reason = self._reason(None, "closed the connection", " during the call")
                    raise McpFailure(reason, sent=True) from None
                self.counters["failures"] += 1
                raise ToolError(f"MCP server {c.name!r} answered {tool!r} with an error: {exc}") from None
        except McpFailure:
            self.counters["failures"] += 1
            raise
        except ToolError:
            raise
        except Exception as exc:  # a result that breaks the protocol (validation)
            self.counters["failures"] += 1
            detail = _first_line(f"{type(exc).__name__}: {exc}")
            raise McpFailure(
                f"MCP server {c.name!r} sent an invalid result for {tool!r}: {detail}", sent=True
            ) from None
        finally:
            gone.cancel()
            if not call.done():
                call.cancel()  # the SDK sends notifications/cancelled (stdio) or closes the stream
                await asyncio.gather(call, return_exceptions=True)


def _first_line(text: str, chars: int = 300) -> str:
    return text.strip().splitlines()[0][:chars] if text.strip() else ""
