"""A request body limit applied before anything parses the body.

:class:`BodyLimit` is plain ASGI middleware: it reads at most ``max_bytes`` of a
request body (refusing at once a ``Content-Length`` over it), answers 413 with the
error body of :mod:`dormant.server.problems` when the body is larger, and otherwise
hands the buffered body to the app. RAM per request is bounded by ``max_bytes``.

A request ``streamed(scope)`` says is streamed (a ``multipart/form-data`` upload to a
thread's inputs) is not buffered: its body goes on to the app as it arrives, bounded
by ``stream_max_bytes`` (its ``Content-Length`` refused at once over it, else 413 as
soon as the bytes pass it); the route bounds each file as it reads.
"""

from __future__ import annotations

from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import PayloadTooLarge
from .problems import error_response


class BodyLimit:
    """Refuse request bodies larger than ``max_bytes`` with 413, before parsing."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_bytes: int,
        streamed: Callable[[Scope], bool] | None = None,
        stream_max_bytes: int = 0,
    ) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.streamed = streamed
        self.stream_max_bytes = stream_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stream = self.streamed is not None and self.streamed(scope)
        cap = self.stream_max_bytes if stream else self.max_bytes
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = 0
                if declared > cap:
                    await self._refuse(cap, scope, receive, send)
                    return
        if stream:
            await self.app(scope, self._counted(receive, cap), send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_bytes:
                await self._refuse(self.max_bytes, scope, receive, send)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        buffered: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        async def replay() -> Message:
            nonlocal buffered
            if buffered is not None:
                message, buffered = buffered, None
                return message
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    @staticmethod
    def _counted(receive: Receive, cap: int) -> Receive:
        """``receive`` raising PayloadTooLarge (413 from the route) once past ``cap`` bytes."""
        size = 0

        async def counted() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > cap:
                raise PayloadTooLarge(f"request body over {cap} bytes")
            return message

        return counted

    async def _refuse(self, cap: int, scope: Scope, receive: Receive, send: Send) -> None:
        exc = PayloadTooLarge(f"request body over {cap} bytes")
        await error_response(exc, scope.get("path", ""))(scope, receive, send)
