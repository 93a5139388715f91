"""Connection guards of ``dormant serve``: header caps and read timeouts, below the app.

uvicorn reads a request's head for as long as a client cares to send it, and keeps
no cap on its size with httptools. :class:`GuardedHttp` is uvicorn's httptools
protocol with four limits (:class:`HttpLimits`, from the ``http_*`` settings):

* ``header_timeout_s``: the request line and headers must arrive within this many
  seconds, counted from the connection's start (first request) or from the request's
  first byte (the next ones on a kept-alive connection; an idle one is closed by
  uvicorn's keep-alive timeout). Else 408 and the connection is closed.
* ``body_timeout_s``: the whole body must arrive within this many seconds of the end
  of the headers. Else 408 (or, once the app has started answering, just the close);
  the app sees the client disconnect.
* ``max_header_bytes``: request line plus headers, in bytes; over it: 431, closed.
* ``max_headers``: header lines; over it: 431, closed.

A dribbling client (a byte now and then) is thus cut off after the timeout whatever
it sends, and holds nothing but its socket and at most ``max_header_bytes`` of head
meanwhile. A refusal answers ``{"error": {"code", "message"}}`` like the app's errors,
is logged at info (``http_refused``) and counted (``on_refuse``).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

log = logging.getLogger("dormant.server.access")


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    """What one connection may take to send a request, and how large its head may be."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    max_header_bytes: int = 32 * 1024
    max_headers: int = 100
    #: called with the reason (``header_timeout``, ``body_timeout``, ``header_bytes``,
    #: ``header_count``) of every refusal
    on_refuse: Callable[[str], None] | None = None


class GuardedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol under :class:`HttpLimits` (see the module)."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True
        self._head_received = 0  # bytes received while reading a head (may count a few body bytes)
        self._head_bytes = 0  # bytes of the request line and headers parsed so far
        self._head_count = 0
        self._refusal: tuple[int, str, str] | None = None
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    # -- the limits ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._unset_keepalive_if_required()
        if self._in_head:
            self._head_received += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return
        except httptools.HttpParserError:
            if self._refusal is not None:
                self._refuse(*self._refusal)
            else:
                self.logger.warning("Invalid HTTP request received.")
                self.send_400_response("Invalid HTTP request received.")
            return
        if self._in_head and self._head_received > self.limits.max_header_bytes:
            self._refuse(*self._too_large())

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_bytes = 0
        self._head_count = 0
        if self._head_timer is None:
            self._arm_head()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        self._head_bytes += len(url)
        if self._head_bytes > self.limits.max_header_bytes:
            self._refusal = self._too_large()
            raise _Refused

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value) + 4
        self._head_count += 1
        if self._head_count > self.limits.max_headers:
            self._refusal = (431, "header_count", f"more than {self.limits.max_headers} request headers")
            raise _Refused
        if self._head_bytes > self.limits.max_header_bytes:
            self._refusal = self._too_large()
            raise _Refused
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_received = 0
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_late)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # -- refusals -----------------------------------------------------------------------

    def _too_large(self) -> tuple[int, str, str]:
        return 431, "header_bytes", f"request line and headers over {self.limits.max_header_bytes} bytes"

    def _arm_head(self) -> None:
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        secs = f"{self.limits.header_timeout_s:g}"
        self._refuse(408, "header_timeout", f"request headers not received within {secs}s")

    def _body_late(self) -> None:
        self._body_timer = None
        secs = f"{self.limits.body_timeout_s:g}"
        self._refuse(408, "body_timeout", f"request body not received within {secs}s")

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = None

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer ``status`` (unless a response is under way) and close the connection."""
        self._cancel_timers()
        if self.transport is None or self.transport.is_closing():
            return
        cycle = self.cycle
        answering = cycle is not None and not cycle.response_complete and cycle.response_started
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app reads a disconnect; what it sends is dropped
            cycle.message_event.set()
        if not answering:
            code = "request_timeout" if status == 408 else "headers_too_large"
            body = json.dumps({"error": {"code": code, "message": message}}).encode()
            head = [STATUS_LINE[status]]
            for name, value in self.server_state.default_headers:
                head += [name, b": ", value, b"\r\n"]
            head += [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode() + b"\r\n",
                b"connection: close\r\n\r\n",
            ]
            self.transport.write(b"".join(head) + body)
        self.transport.close()
        client = f"{self.client[0]}:{self.client[1]}" if self.client else "-"
        log.info("http_refused", extra={"status": status, "reason": reason, "client": client})
        if self.limits.on_refuse is not None:
            self.limits.on_refuse(reason)


class _Refused(Exception):
    """Raised in a parser callback to stop parsing a head over a cap."""


def guarded(limits: HttpLimits) -> type[GuardedHttp]:
    """A :class:`GuardedHttp` class bound to ``limits`` (uvicorn takes a class as ``http``)."""
    return type("GuardedHttp", (GuardedHttp,), {"limits": limits})
