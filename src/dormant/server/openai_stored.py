"""Stored responses: ``responses.retrieve``, ``responses.input_items.list``, ``responses.delete``.

A response id names a point of a durable thread (``resp_<hex of the thread id>_<seq>``:
:func:`~dormant.server.openai_responses.response_id`), so nothing is kept for it
but the thread's own messages:

* ``GET /v1/responses/{id}`` reads the assistant message at that seq and answers the
  ``response`` object (its text, its tool calls as ``function_call`` items, its usage);
* ``GET /v1/responses/{id}/input_items`` lists what that turn took in: the user and tool
  messages after the previous reply, newest first by default (``order``), paged with
  ``after`` and ``limit`` (at most 100; a turn's inputs are read back at most
  :data:`~dormant.server.turns.LOOKBACK` messages);
* ``DELETE /v1/responses/{id}`` deletes a response that is its conversation's only one
  (with its thread); a response of a longer conversation is refused (400), never
  deleted with the others: a thread is one history, which dormant never cuts in the
  middle, and ``DELETE /v1/threads/{id}`` is the call that deletes a whole conversation.

Another tenant's response id, or one whose message is not an assistant reply, is 404.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Path, Query, Request

from ..errors import NotFound, UsageError
from ..records import Message
from ..tenants.scope import Scope
from .openai_responses import parse_response_id, response_body
from .routes import ERRORS, TenantScope
from .state import state_of
from .turns import LOOKBACK, Outcome, tokens_of

router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS)

_ITEM_ID = re.compile(r"^(?:msg|fco)_([0-9]{1,18})$")


async def _reply(request: Request, scope: Scope, rid: str) -> tuple[str, Message]:
    """The stored thread and assistant message a response id names; NotFound otherwise.

    An id names its reply's seq, or, for a streamed response (whose id is given before
    the reply exists), the seq its turn starts at: then the turn's reply is the first
    assistant message without tool calls from there (within :data:`LOOKBACK` messages)."""
    thread_id, seq = parse_response_id(scope, rid)
    rt = state_of(request).runtime
    page = await rt.history(thread_id, cursor=str(seq - 1), limit=LOOKBACK, tenant=scope.tenant_id)
    if not page.items or page.items[0].seq != seq:
        raise NotFound(f"no response {rid!r}")
    if page.items[0].role == "assistant":
        return thread_id, page.items[0]
    for message in page.items[1:]:
        if message.role == "assistant" and not message.tool_calls:
            return thread_id, message
    raise NotFound(f"no response {rid!r}")


def _outcome(thread_id: str, message: Message) -> Outcome:
    usage = message.usage
    reason = "tool_calls" if message.tool_calls else ("length" if message.cut else "stop")
    return Outcome(
        thread_id=thread_id,
        reply=message,
        finish_reason=reason,
        tool_calls=message.tool_calls,
        prompt_tokens=usage.prompt if usage is not None else 0,
        completion_tokens=(
            usage.completion
            if usage is not None
            else tokens_of([message.content] + [c.arguments for c in message.tool_calls])
        ),
    )


#: The path parameter of a response id (OpenAI's ids are short; ours carry the thread id).
ResponseId = Annotated[str, Path(max_length=600)]


@router.get("/responses/{response_id}")
async def retrieve_response(request: Request, scope: TenantScope, response_id: ResponseId) -> dict[str, Any]:
    """A stored response (``responses.retrieve``): the reply at that point of its thread."""
    thread_id, message = await _reply(request, scope, response_id)
    agent = (await state_of(request).runtime.thread(thread_id, tenant=scope.tenant_id)).agent
    body = response_body(response_id, agent, _outcome(thread_id, message), f"msg_{message.seq}", {})
    body["created_at"] = int(message.created_at)
    return body


def input_item(message: Message) -> dict[str, Any]:
    """A message a turn took in, as a Responses input item."""
    if message.role == "tool":
        return {
            "type": "function_call_output",
            "id": f"fco_{message.seq}",
            "call_id": message.tool_call_id,
            "output": message.content,
            "status": "completed",
        }
    return {
        "type": "message",
        "id": f"msg_{message.seq}",
        "role": "user",
        "status": "completed",
        "content": [{"type": "input_text", "text": message.content}],
    }


@router.get("/responses/{response_id}/input_items")
async def list_input_items(
    request: Request,
    scope: TenantScope,
    response_id: ResponseId,
    after: Annotated[str | None, Query(pattern=r"^(msg|fco)_[0-9]{1,18}$")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
) -> dict[str, Any]:
    """The inputs of a stored response's turn (``responses.input_items.list``): the user
    and tool messages since the reply before it, paged."""
    thread_id, message = await _reply(request, scope, response_id)
    rt = state_of(request).runtime
    page = await rt.history(
        thread_id, cursor=str(message.seq), limit=LOOKBACK, newest_first=True, tenant=scope.tenant_id
    )
    taken: list[Message] = []
    for earlier in page.items:  # newest first, from the message before the reply
        if earlier.role == "assistant" and not earlier.tool_calls:
            break  # the previous turn's reply
        if earlier.role in ("user", "tool"):
            taken.append(earlier)
    if order == "asc":
        taken.reverse()
    if after is not None:
        match = _ITEM_ID.match(after)
        assert match is not None
        mark = int(match.group(1))
        taken = [m for m in taken if (m.seq > mark if order == "asc" else m.seq < mark)]
    shown = taken[:limit]
    data = [input_item(m) for m in shown]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": len(taken) > limit,
    }


@router.delete("/responses/{response_id}")
async def delete_response(request: Request, scope: TenantScope, response_id: ResponseId) -> dict[str, Any]:
    """Delete a stored response (``responses.delete``) that is the only one of its
    conversation, with its thread. UsageError (400, nothing deleted) when the thread holds
    more than that turn: deleting this response would delete the others."""
    thread_id, message = await _reply(request, scope, response_id)
    rt = state_of(request).runtime
    thread = await rt.thread(thread_id, tenant=scope.tenant_id)
    before = await rt.history(
        thread_id, cursor=str(message.seq), limit=LOOKBACK, newest_first=True, tenant=scope.tenant_id
    )
    earlier_reply = any(m.role == "assistant" and not m.tool_calls for m in before.items)
    if thread.last_seq > message.seq or earlier_reply or before.next_cursor is not None:
        raise UsageError(
            f"response {response_id!r} is one turn of a longer conversation; deleting it would "
            f"delete them all: DELETE /v1/threads/{scope.outer(thread_id)} deletes the conversation"
        )
    await rt.delete_thread(thread_id, tenant=scope.tenant_id)
    return {"id": response_id, "object": "response", "deleted": True}
