"""The one check of the text a client sends: no lone surrogate, no NUL, valid UTF-8.

Every route's text arrives in one of three places: the JSON body, the query string
and the path. :class:`TextGuard` is ASGI middleware that looks at all three before
any route sees the request, and refuses with 422 ``invalid_input`` (naming the field
and the character's position) text that the store could not keep the same way on
every backend:

* a lone surrogate (``"\\ud800"`` in JSON): not a character, and ``str.encode()``
  raises on it;
* NUL (``"\\u0000"``): PostgreSQL's ``text`` and ``jsonb`` refuse it, SQLite takes it;
* a body that is not UTF-8.

The rule is *refuse*, never *clean*: text a person sent is stored as they sent it or
not at all, so a retry with the same body is the same input (model replies and tool
outputs, which no client sent, are cleaned by :func:`dormant.text.clean` instead).

A ``multipart/form-data`` upload to a thread's inputs is not buffered here: its route
checks each text field with :func:`check_text` as it parses the stream.

The body is the one :class:`~dormant.server.limits.BodyLimit` buffered (bounded by
its byte cap). A JSON body can only hold either character as a ``\\u`` escape, so a
body without ``\\u`` is not parsed here at all; one with it is parsed once and walked
(keys and values) with an explicit stack, bounded by the body's size.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import InvalidInput
from .multipart import is_multipart
from .problems import error_response

_BAD = re.compile("[\x00\ud800-\udfff]")
#: Most problems named in one refusal.
MAX_REPORTED = 5


def problem(text: str) -> str | None:
    """Why ``text`` cannot be taken (a lone surrogate or NUL, and where), or None."""
    found = _BAD.search(text)
    if found is None:
        return None
    char = found.group()
    what = "a NUL character (\\u0000)" if char == "\x00" else f"a lone surrogate (\\u{ord(char):04x})"
    return f"contains {what} at position {found.start()}"


def check_text(text: str, where: str) -> None:
    """InvalidInput (422) when ``text`` holds a lone surrogate or NUL; ``where`` names it."""
    why = problem(text)
    if why is not None:
        raise InvalidInput(f"{where} {why}: text must be valid Unicode without NUL")


def body_problems(raw: bytes) -> list[str]:
    """What is wrong with the text of a JSON body (empty: nothing). A body that is not
    JSON at all is left to the route's own validation (422 there)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return [f"body: not UTF-8 (byte {exc.start})"]
    if "\\u" not in text and "\\U" not in text:
        return []  # neither character can appear in JSON but as an escape
    try:
        document = json.loads(text)
    except ValueError:
        return []
    found: list[str] = []
    stack: list[tuple[str, Any]] = [("body", document)]
    while stack and len(found) < MAX_REPORTED:
        where, value = stack.pop()
        if isinstance(value, str):
            why = problem(value)
            if why is not None:
                found.append(f"{where} {why}")
        elif isinstance(value, dict):
            for key, item in value.items():
                why = problem(key)
                if why is not None:
                    found.append(f"{where}: a key {why}")
                    continue
                stack.append((f"{where}.{key}", item))
        elif isinstance(value, list):
            stack.extend((f"{where}.{index}", item) for index, item in enumerate(value))
    return found


def url_problems(scope: Scope) -> list[str]:
    """What is wrong with the request's path and query string (decoded as routes see them)."""
    found: list[str] = []
    path = scope.get("path", "")
    why = problem(path)
    if why is not None:
        found.append(f"path {why}")
    query = scope.get("query_string", b"")
    if query:
        raw = unquote_to_bytes(query.replace(b"+", b" "))
        try:
            decoded = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            found.append(f"query: not UTF-8 (byte {exc.start})")
        else:
            why = problem(decoded)
            if why is not None:
                found.append(f"query {why}")
    return found


class TextGuard:
    """Refuse (422, before any route runs) a request whose path, query or JSON body holds
    a lone surrogate or NUL, or whose body is not UTF-8."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        found = url_problems(scope)
        if found:
            await self._refuse(found, scope, receive, send)
            return
        if scope.get("method") not in ("POST", "PUT", "PATCH") or is_multipart(scope):
            # a multipart upload streams on: its route checks its text fields (check_text)
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:  # BodyLimit (outside this middleware) already bounded and buffered it
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        found = body_problems(body)
        if found:
            await self._refuse(found, scope, receive, send)
            return
        buffered: Message | None = {"type": "http.request", "body": body, "more_body": False}

        async def replay() -> Message:
            nonlocal buffered
            if buffered is not None:
                message, buffered = buffered, None
                return message
            return await receive()  # after the body: wait for the disconnect

        await self.app(scope, replay, send)

    async def _refuse(self, found: list[str], scope: Scope, receive: Receive, send: Send) -> None:
        exc = InvalidInput("; ".join(found) + ": text must be valid Unicode without NUL")
        await error_response(exc, scope.get("path", ""))(scope, receive, send)
