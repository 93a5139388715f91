"""The MCP servers of one worker, and their tools as :class:`~dormant.tools.spec.ToolSpec`.

:class:`McpHub` holds one :class:`~.link.ServerLink` per server name (every agent naming
a server shares it), lists each server's tools when the worker starts, and lists them
again when a server says its list changed and every ``refresh_s``. Each tool becomes an
**async** tool named ``<server>__<tool>`` (:mod:`.naming`) with the server's JSON schema:
the slice writes the call to the outbox, the dispatcher runs it, and the result comes
back as an input. The call id is the idempotency key (sent as ``_meta.dormant/callId``).

What a result becomes (:func:`result_items`): text parts and structured content are the
tool result's text; an image (``ImageContent``) and a binary embedded resource become
the result's image and file parts, checked and stored like a user's
(:mod:`dormant.tools.results`: a refused one makes the result an error); audio is stored
as a blob and shown as a line naming it; ``is_error`` is an error result the model sees.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import ToolError
from ...parts import File, Image
from ..blobs import BlobWriter
from ..spec import ApprovalPolicy, ToolBox, ToolContext, ToolProgress, ToolSpec
from .config import McpServer, check_unique
from .naming import model_names

if TYPE_CHECKING:
    # the SDK (~25 MB and ~0.6 s to import) loads when a server is first attached, so a
    # process whose agents name no MCP server never pays for it
    import mcp_types as types

    from .link import ServerLink

log = logging.getLogger("dormant.mcp")

#: Longest tool description shown to the model (the listing's byte bound applies too).
MAX_DESCRIPTION = 2048
#: The context parameter's name (no MCP tool argument is called this).
_CTX = "__dormant_ctx__"
#: At most one progress event per call in this many seconds reaches the thread's event
#: stream (a server may send thousands; each still restarts the call's idle timeout).
PROGRESS_EVERY_S = 0.25
#: Longest progress message passed on.
MAX_PROGRESS_MESSAGE = 512


@dataclass(frozen=True, slots=True)
class ServerStatus:
    """What ``dormant mcp list`` and ``/metrics`` show of one server."""

    name: str
    transport: str
    where: str
    up: bool
    tools: tuple[str, ...]
    cut: bool
    error: str | None
    counters: dict[str, int]


class McpHub:
    """The MCP servers of a worker's agents. ``boxes`` pairs each agent's servers with
    its toolbox (the hub puts the listed tools there)."""

    def __init__(self, boxes: Sequence[tuple[Sequence[McpServer], ToolBox]]) -> None:
        check_unique([s for servers, _ in boxes for s in servers])
        self.links: dict[str, ServerLink] = {}
        self._boxes: dict[str, list[ToolBox]] = {}
        self._tools: dict[str, tuple[str, ...]] = {}
        self._cut: dict[str, bool] = {}
        self._due: dict[str, float] = {}
        self._changed: set[str] = set()
        self._wake = asyncio.Event()
        for servers, box in boxes:
            for server in servers:
                if server.name not in self.links:
                    from .link import ServerLink

                    self.links[server.name] = ServerLink(server, on_tools_changed=self._flag(server.name))
                self._boxes.setdefault(server.name, []).append(box)

    def __bool__(self) -> bool:
        return bool(self.links)

    def _flag(self, name: str) -> Any:
        def changed() -> None:
            self._changed.add(name)
            self._wake.set()

        return changed

    async def start(self) -> None:
        """List every server's tools (concurrently, each within its ``start_timeout``);
        a server that fails is logged and listed again later, its tools absent meanwhile."""
        await asyncio.gather(*(self.refresh(name) for name in self.links))

    async def refresh(self, name: str) -> bool:
        """List ``name``'s tools again and put them in its agents' toolboxes. Answers
        whether it worked (a failure keeps the tools listed before)."""
        link = self.links[name]
        self._due[name] = time.monotonic() + link.config.refresh_s
        try:
            listed, cut = await link.list_tools()
        except (ToolError, OSError) as exc:
            log.warning("mcp_list_failed", extra={"server": name, "error": str(exc)})
            self._due[name] = time.monotonic() + min(link.config.refresh_s, 5.0)
            return False
        specs = tool_specs(link, listed)
        self._tools[name] = tuple(s.name for s in specs)
        self._cut[name] = cut
        for box in self._boxes[name]:
            for clash in box.set_found(name, specs):
                log.warning("mcp_tool_name_taken", extra={"server": name, "tool": clash})
        log.info("mcp_tools_listed", extra={"server": name, "tools": len(specs), "cut": cut})
        return True

    async def run(self, stop: asyncio.Event) -> None:
        """Refresh listings when a server says they changed and when they are due, until
        ``stop``; then stop every server."""
        try:
            while not stop.is_set():
                now = time.monotonic()
                due = [n for n, at in self._due.items() if at <= now]
                for name in sorted(set(due) | self._changed):
                    self._changed.discard(name)
                    await self.refresh(name)
                self._wake.clear()
                wait = min([*(at - time.monotonic() for at in self._due.values()), 60.0])
                waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
                try:
                    await asyncio.wait(waiters, timeout=max(wait, 0.01), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop every server process (and HTTP connection)."""
        await asyncio.gather(*(link.close() for link in self.links.values()), return_exceptions=True)

    def status(self) -> list[ServerStatus]:
        """Each server's state now."""
        return [
            ServerStatus(
                name=name,
                transport=link.config.transport,
                where=link.config.where(),
                up=link._client is not None,
                tools=self._tools.get(name, ()),
                cut=self._cut.get(name, False),
                error=link.last_error,
                counters=dict(link.counters),
            )
            for name, link in self.links.items()
        ]


def tool_specs(link: ServerLink, listed: Sequence[types.Tool]) -> list[ToolSpec]:
    """The async tools the model sees for ``listed``, the tools of ``link``'s server."""
    config = link.config
    names = model_names(config.name, [t.name for t in listed])
    specs = []
    for item in listed:
        hint = item.annotations.idempotent_hint if item.annotations is not None else None
        schema = dict(item.input_schema) if isinstance(item.input_schema, dict) else {}
        schema.setdefault("type", "object")
        specs.append(
            ToolSpec(
                name=names[item.name],
                description=(item.description or item.title or item.name)[:MAX_DESCRIPTION],
                parameters=schema,
                fn=_caller(link, item.name, config.is_idempotent(item.name, hint)),
                mode="async",
                idempotent=config.is_idempotent(item.name, hint),
                # the link's own bounds end a call first; this is the dispatcher's backstop
                timeout=config.max_call_s + config.start_timeout + 5.0,
                context_param=_CTX,
                approval=ApprovalPolicy(deadline_s=config.approval_s)
                if config.needs_approval_of(item.name)
                else None,
            )
        )
    return specs


def _caller(link: ServerLink, tool: str, idempotent: bool) -> Any:
    async def call(**kwargs: Any) -> str | list[str | Image | File]:
        from .link import McpFailure

        ctx: ToolContext = kwargs.pop(_CTX)
        try:
            result = await link.call(
                tool,
                kwargs,
                idle_timeout=link.config.timeout_for(tool),
                call_id=ctx.call_id,
                on_progress=progress_reporter(ctx),
            )
        except McpFailure as exc:
            if exc.sent and not idempotent:
                raise ToolError(f"outcome unknown: {exc}", retryable=False) from None
            raise ToolError(str(exc), retryable=True) from None
        items = await result_items(result, ctx.blob_writer, ctx.thread_id)
        if result.is_error:
            text = "\n".join(i if isinstance(i, str) else f"[{type(i).__name__.lower()}]" for i in items)
            raise ToolError(f"MCP tool {link.config.name}/{tool} failed: {text}")
        if any(isinstance(i, Image | File) for i in items):
            return items  # stored as the result's parts by the dispatcher (dormant.tools.results)
        return "\n".join(i for i in items if isinstance(i, str))

    call.__name__ = f"mcp_{link.config.name}_{tool}"
    return call


def progress_reporter(
    ctx: ToolContext, every_s: float = PROGRESS_EVERY_S
) -> Callable[[float, float | None, str | None], Awaitable[None]] | None:
    """The progress callback of one call: reports to ``ctx.progress`` at most once per
    ``every_s`` (the newest in between is dropped, except a final one, progress == total,
    which is always reported). None when nobody listens."""
    report = ctx.progress
    if report is None:
        return None
    last = -every_s

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal last
        now = time.monotonic()
        final = total is not None and progress >= total
        if now - last < every_s and not final:
            return
        last = now
        report(
            ToolProgress(
                call_id=ctx.call_id,
                progress=progress,
                total=total,
                message=message[:MAX_PROGRESS_MESSAGE] if message else None,
            )
        )

    return on_progress


async def result_items(
    result: types.CallToolResult, blobs: BlobWriter | None, thread_id: str
) -> list[str | Image | File]:
    """What ``result`` holds, in order: text (its text parts, then its structured content
    as JSON unless a text part already is that JSON, or the value an SDK wrapped as
    ``{"result": ...}``), an :class:`~dormant.parts.Image` per image and a
    :class:`~dormant.parts.File` per binary resource (their bytes, not yet checked: the
    dispatcher stores them as parts). Audio is stored as a blob through ``blobs`` and named
    by a line (dropped, and said so, when ``blobs`` is None); base64 that does not decode
    is a line saying so."""
    import mcp_types as types

    parts: list[str | Image | File] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, types.ImageContent):
            raw = _decoded(item.data)
            parts.append(
                Image(raw) if raw is not None else f"[image {item.mime_type}: not valid base64, dropped]"
            )
        elif isinstance(item, types.AudioContent):
            parts.append(await _blob_line(blobs, thread_id, item.data, f"audio {item.mime_type}"))
        elif isinstance(item, types.EmbeddedResource):
            res = item.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                raw = _decoded(res.blob)
                name = str(res.uri).rstrip("/").rsplit("/", 1)[-1] or None
                parts.append(
                    File(raw, name=name)
                    if raw is not None
                    else f"[resource {res.uri}: not valid base64, dropped]"
                )
        elif isinstance(item, types.ResourceLink):
            parts.append(f"[resource link {item.uri}" + (f" ({item.name})" if item.name else "") + "]")
        else:
            parts.append(f"[{getattr(item, 'type', type(item).__name__)} content]")
    if result.structured_content is not None:
        encoded = json.dumps(result.structured_content, ensure_ascii=False, separators=(",", ":"))
        value = result.structured_content
        # the SDKs wrap a tool's non-object output as {"result": ...} beside its text
        wrapped = value["result"] if list(value) == ["result"] else value
        texts = [p for p in parts if isinstance(p, str)]
        if not any(p == wrapped or _same_json(p, value) or _same_json(p, wrapped) for p in texts):
            parts.append(encoded)
    return parts


def _decoded(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _same_json(text: str, value: object) -> bool:
    try:
        return bool(json.loads(text) == value)
    except ValueError:
        return False


async def _blob_line(blobs: BlobWriter | None, thread_id: str, data: str, what: str) -> str:
    raw = _decoded(data)
    if raw is None:
        return f"[{what}: not valid base64, dropped]"
    if blobs is None:
        return f"[{what}, {len(raw)} bytes: not stored (no blob store here)]"
    ref = await blobs.put_blob(thread_id, [raw])
    return f"[{what}, {ref.size} bytes, stored as blob {ref.ref}]"
