"""dormant's memory and threads as the tools of an MCP server, for one tenant per call.

:func:`build_server` makes an SDK :class:`~mcp.server.mcpserver.MCPServer` whose tools
call the same functions as the REST API (:mod:`dormant.server.calls`), validated by the
same request bodies. ``tenant_of`` tells each call's tenant: fixed for stdio (``dormant
mcp serve --tenant``), the API key's for HTTP (``/mcp``, see :mod:`.http`).

Errors are JSON-RPC errors, never a crash: a bad argument, an unknown thread, another
tenant's record or thread (not found, exactly as the REST API's 404) are ``-32602``
(invalid params) with the error's code and message; an operational condition (store
error, overload) is ``-32603`` with its code and message.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal

import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as SdkToolError
from mcp.shared.exceptions import MCPError
from pydantic import Field, ValidationError

from ...errors import DormantError, UsageError
from ...runtime import Runtime
from ...store.base import MAX_PAGE
from ...tenants.scope import Scope
from .. import calls
from ..hub import Hub
from ..memory_schemas import MemoryAdd, MemoryRecall
from ..quotas import TenantQuotas
from ..schemas import InputCreate

#: How a call learns its tenant (from the server's configuration or the request's key).
TenantOf = Callable[[Context], Awaitable[Scope]]

Subject = Annotated[str | None, Field(description="a binding key (b2_...), or give identity")]
IdentityArg = Annotated[
    dict[str, str] | None,
    Field(description='identity parts, e.g. {"phone": "+1 555-0100"}, bound into the subject key'),
]
Cursor = Annotated[str | None, Field(description="next_cursor of the page before")]

INSTRUCTIONS = (
    "dormant's long-term memory (remember, recall, forget, memory_history: a subject is a "
    "binding key or identity parts) and durable agent threads (send_to_thread, read_thread, "
    "thread_status) of one tenant."
)


def _invalid(exc: ValidationError) -> MCPError:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return MCPError(types.INVALID_PARAMS, "invalid arguments: " + "; ".join(parts))


async def _run(call: Awaitable[Any]) -> Any:
    """``call``'s result, its errors as JSON-RPC errors with the dormant error code."""
    try:
        return await call
    except ValidationError as exc:
        raise _invalid(exc) from None
    except UsageError as exc:  # the caller's mistake, not found included
        raise MCPError(types.INVALID_PARAMS, f"{exc.code}: {exc}") from None
    except DormantError as exc:
        raise MCPError(types.INTERNAL_ERROR, f"{exc.code}: {exc}") from None


def _keys(subject: str | None, identity: dict[str, str] | None) -> tuple[list[str], dict[str, str] | None]:
    if (subject is None) == (identity is None):
        raise MCPError(types.INVALID_PARAMS, "name the subject by 'subject' (a binding key) or 'identity'")
    return ([subject] if subject is not None else []), identity


class _Server(MCPServer):
    """The SDK's server, with arguments that fail its schema check answered as a JSON-RPC
    invalid-params error (the SDK makes them an error *result*, which a host shows the
    model as if the tool had run)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Context | None = None) -> Any:
        try:
            return await super().call_tool(name, arguments, context)
        except SdkToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise _invalid(exc.__cause__) from None
            raise


def build_server(
    runtime: Runtime,
    tenant_of: TenantOf,
    *,
    name: str = "dormant",
    quotas: TenantQuotas | None = None,
    hub: Hub | None = None,
) -> MCPServer:
    """The MCP server of ``runtime``'s memory and threads (tools only); ``quotas`` and
    ``hub`` are the serving app's (admissions are limited as the REST API's are)."""
    server: MCPServer = _Server(name, instructions=INSTRUCTIONS, log_level="WARNING")

    async def keys_of(ctx: Context, subject: str | None, identity: dict[str, str] | None) -> list[str]:
        keys, parts = _keys(subject, identity)
        memory = await calls.memory_of(runtime, await tenant_of(ctx))
        return await calls.subject_keys(memory, keys, parts)

    @server.tool(description="Store one memory of a subject durably (answered after it is committed).")
    async def remember(
        ctx: Context,
        text: Annotated[str, Field(description="the memory, one fact or preference")],
        subject: Subject = None,
        identity: IdentityArg = None,
        kind: Annotated[str, Field(description="fact, preference, event, instruction or note")] = "fact",
        tags: dict[str, Any] | None = None,
        importance: float = 0.5,
        replaces: list[str] | None = None,
        valid_from: Annotated[float | None, Field(description="UNIX time it became true")] = None,
        observed_at: Annotated[float | None, Field(description="UNIX time it was seen")] = None,
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            body = MemoryAdd.model_validate(
                {
                    "text": text,
                    "subject": subject,
                    "identity": identity,
                    "kind": kind,
                    "tags": tags or {},
                    "importance": importance,
                    "replaces": replaces or [],
                    "valid_from": valid_from,
                    "observed_at": observed_at,
                }
            )
            memory = await calls.memory_of(runtime, await tenant_of(ctx))
            return (await calls.add_memory(memory, body, actor="mcp")).model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(description="The best k memories of a subject for a query, best first.")
    async def recall(
        ctx: Context,
        query: str = "",
        subject: Subject = None,
        identity: IdentityArg = None,
        k: int = 5,
        kinds: list[str] | None = None,
        tags: dict[str, Any] | None = None,
        at: Annotated[float | None, Field(description="as of this UNIX time (default: now)")] = None,
        explain: Annotated[bool, Field(description="each hit with the parts of its rank")] = False,
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            body = MemoryRecall.model_validate(
                {
                    "query": query,
                    "subjects": [subject] if subject is not None else [],
                    "identity": identity,
                    "k": k,
                    "kinds": kinds or [],
                    "tags": tags or {},
                    "at": at,
                    "explain": explain,
                }
            )
            memory = await calls.memory_of(runtime, await tenant_of(ctx))
            return (await calls.recall_memory(memory, body)).model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(description="Forget one memory of a subject (it stays in the record's history).")
    async def forget(
        ctx: Context,
        record_id: Annotated[str, Field(description="the record's id (from remember or recall)")],
        subject: Subject = None,
        identity: IdentityArg = None,
        reason: str = "",
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            keys = await keys_of(ctx, subject, identity)
            memory = await calls.memory_of(runtime, await tenant_of(ctx))
            await calls.forget_memory(memory, keys, record_id, reason=reason[:500], actor="mcp")
            return {"forgotten": record_id}

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(description="One page of a memory record's changes, oldest first.")
    async def memory_history(
        ctx: Context,
        record_id: str,
        subject: Subject = None,
        identity: IdentityArg = None,
        cursor: Cursor = None,
        limit: int = 50,
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            _check_page(cursor, limit, 500)
            keys = await keys_of(ctx, subject, identity)
            memory = await calls.memory_of(runtime, await tenant_of(ctx))
            page = await calls.record_history(memory, keys, record_id, cursor=cursor, limit=limit)
            return page.model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(
        description="Send user text to a thread (created when new); answered once durable. The same "
        "dedup_key again on the same thread is admitted once (duplicate: true)."
    )
    async def send_to_thread(
        ctx: Context,
        thread_id: str,
        content: str,
        dedup_key: Annotated[str | None, Field(description="admitted once per thread")] = None,
        agent: str | None = None,
        priority: Literal[0, 1, 2] = 1,
        identity: IdentityArg = None,
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            if dedup_key is not None and not 1 <= len(dedup_key) <= 200:
                raise MCPError(types.INVALID_PARAMS, "dedup_key: 1 to 200 characters")
            body = InputCreate.model_validate(
                {"content": content, "agent": agent, "priority": priority, "identity": identity}
            )
            scope = await tenant_of(ctx)
            out = await calls.send_input(
                runtime, scope, thread_id, body, dedup_key=dedup_key, origin="mcp", quotas=quotas, hub=hub
            )
            return out.model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(description="One page of a thread's messages (oldest first, or newest with order=desc).")
    async def read_thread(
        ctx: Context,
        thread_id: str,
        cursor: Cursor = None,
        limit: int = 50,
        order: Literal["asc", "desc"] = "asc",
    ) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            _check_page(cursor, limit, MAX_PAGE)
            scope = await tenant_of(ctx)
            page = await calls.message_page(
                runtime, scope, thread_id, cursor=cursor, limit=limit, order=order
            )
            return page.model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    @server.tool(description="A thread's status: active/failed/..., open calls, last seq, error, usage.")
    async def thread_status(ctx: Context, thread_id: str) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            return (await calls.thread_out(runtime, await tenant_of(ctx), thread_id)).model_dump()

        return await _run(go())  # type: ignore[no-any-return]

    return server


def _check_page(cursor: str | None, limit: int, most: int) -> None:
    if cursor is not None and not (cursor.isascii() and cursor.isdigit() and len(cursor) <= 18):
        raise MCPError(types.INVALID_PARAMS, "cursor: pass back a page's next_cursor")
    if not 1 <= limit <= most:
        raise MCPError(types.INVALID_PARAMS, f"limit: 1 to {most}")
