"""``POST /v1/responses``: OpenAI's Responses API onto durable threads.

A ``conversation`` (an id, or ``{"id": ...}``) names the tenant's thread
``conv-<id>``; a ``previous_response_id`` continues the thread of that response
(its id carries the thread: ``resp_<hex of the thread id>_<seq>``); with neither, a new
thread is made, and the answer's id continues it. ``input`` is text or a list of
items: user messages are admitted, ``function_call_output`` items answer the open
call they name. An ``Idempotency-Key`` header makes a retried request admit nothing
twice. ``model`` names the agent. Streaming sends the
Responses event sequence (``response.created`` … ``response.completed``).

``tools`` of type ``function`` are the client's own (:mod:`dormant.tools.external`): a
call to one ends the response with a ``function_call`` item, and a
``function_call_output`` item of a later request (after ``previous_response_id``)
answers it; built-in tool types are refused, 400.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import DormantError, IdempotencyMismatch, NotFound, UsageError
from ..parts import PartInput
from ..records import NewInput
from ..tenants.scope import Scope
from ..tools import external
from .idempotency import body_fingerprint
from .inflight import ClientGone, until_disconnect
from .openai_input import client_tools, content_text, with_parts
from .openai_models import model_agent
from .routes import ERRORS, TenantScope, check_size
from .state import state_of
from .turns import Answer, Outcome, admitted, exchange, final

router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS)

_RESPONSE_ID = re.compile(r"^resp_([0-9a-f]{2,512})_([0-9]{1,18})$")
_PLAIN_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,120}$")


class ConversationRef(BaseModel):
    """``{"id": ...}`` form of a conversation."""

    model_config = ConfigDict(extra="allow")
    id: str = Field(..., min_length=1, max_length=256)


class ResponsesRequest(BaseModel):
    """A Responses request; fields this server does not use are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(..., max_length=256)
    input: str | list[dict[str, Any]] = Field(...)
    conversation: str | ConversationRef | None = None
    previous_response_id: str | None = Field(None, max_length=600)
    stream: bool = False
    tools: list[dict[str, Any]] | None = None


def response_id(scope: Scope, thread_id: str, seq: int) -> str:
    """The id of the response ending at ``seq`` of stored thread ``thread_id``."""
    return f"resp_{scope.outer(thread_id).encode().hex()}_{seq}"


def parse_response_id(scope: Scope, rid: str) -> tuple[str, int]:
    """The stored thread and seq a response id names; NotFound (404) for one that is not
    a response id (whose thread may still not exist: the caller reads it)."""
    match = _RESPONSE_ID.match(rid)
    if match is None:
        raise NotFound(f"no response {rid!r}")
    try:
        outer = bytes.fromhex(match.group(1)).decode()
        return scope.inner(outer), int(match.group(2))
    except (ValueError, UsageError):
        raise NotFound(f"no response {rid!r}") from None


def thread_of(scope: Scope, body: ResponsesRequest) -> tuple[str, bool]:
    """The stored thread a request continues, and whether it must exist already."""
    if body.previous_response_id:
        return parse_response_id(scope, body.previous_response_id)[0], True
    if body.conversation is not None:
        cid = body.conversation if isinstance(body.conversation, str) else body.conversation.id
        if not _PLAIN_ID.match(cid):
            raise UsageError("conversation ids are 1-120 of A-Z a-z 0-9 . _ : @ -")
        return scope.inner(f"conv-{cid}"), False
    return scope.inner(f"resp-{uuid.uuid4().hex}"), False


def dedup_prefix(body: ResponsesRequest, key: str | None) -> str | None:
    """What the dedup keys of a request's user inputs start with, or None (each is new).

    With an ``Idempotency-Key``, the key. Without one, a request that continues a
    ``previous_response_id`` is keyed by that id and a hash of its ``input``: the same
    continuation posted twice (a retry) appends once. A thread is a line, not a tree, so
    a second, different answer to one response cannot be had by posting it again.
    """
    if key:
        return f"resp:{key}"
    if body.previous_response_id:
        raw = json.dumps(body.input, sort_keys=True, separators=(",", ":"))
        return f"cont:{body.previous_response_id}:{hashlib.sha256(raw.encode()).hexdigest()[:32]}"
    return None


def parse_input(
    body: ResponsesRequest,
    thread_id: str,
    agent: str,
    key: str | None,
    request: Request,
    tools: str | None = None,
    media: list[list[PartInput]] | None = None,
) -> tuple[list[NewInput], list[Answer]]:
    """The user inputs and tool answers of a request's ``input``; with ``media``, the
    images and files of each user input are decoded into it (one list per input); a
    part or item the agent cannot take (audio, a URL, a file_id) is refused, 400."""
    raw: list[dict[str, Any]] = (
        [{"role": "user", "content": body.input}] if isinstance(body.input, str) else body.input
    )
    prefix = dedup_prefix(body, key)
    signed = body_fingerprint(body) if key else None
    items: list[NewInput] = []
    answers: list[Answer] = []
    for index, item in enumerate(raw):
        where = f"input.{index}"
        kind = item.get("type", "message")
        if kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str) or not 0 < len(call_id) <= 256:
                raise UsageError(f"{where}: a function_call_output needs a call_id (1-256 characters)")
            output = content_text(output, where) if isinstance(output, list) else output
            if not isinstance(output, str):
                raise UsageError(f"{where}: a function_call_output needs an output string")
            check_size(request, output)
            answers.append(Answer(call_id=call_id, content=output))
        elif kind == "message":
            role = item.get("role")
            content = item.get("content")
            if not isinstance(content, str | list):
                raise UsageError(f"{where}: a message needs text content")
            found: list[PartInput] = []
            text = content_text(content, where, found if role == "user" and media is not None else None)
            if role in ("system", "developer", "assistant"):
                continue  # the agent has its own instructions, and its replies are stored
            if role != "user":
                raise UsageError(f"{where}: a message's role is user, assistant, system or developer")
            check_size(request, text)
            if media is not None:
                media.append(found)
            dedup = f"{prefix}:{index}" if prefix else f"auto:{uuid.uuid4().hex}"
            items.append(
                NewInput(
                    thread_id=thread_id,
                    kind="user",
                    dedup_key=dedup,
                    content=text,
                    agent=agent,
                    fingerprint=signed,
                    tools=tools,
                )
            )
        elif kind in ("function_call", "reasoning"):
            continue  # the agent's own output, echoed back: it is stored already
        else:
            raise UsageError(
                f"{where}: an input item of type {kind!r} cannot be taken (this server takes user "
                "messages and function_call_output items)"
            )
    return items, answers


def response_body(
    rid: str, model: str, outcome: Outcome | None, msg_id: str, extra: dict[str, Any]
) -> dict[str, Any]:
    """A ``response`` object (``in_progress`` without an outcome)."""
    output: list[dict[str, Any]] = []
    usage = None
    if outcome is not None:
        if outcome.reply.content:
            output.append(message_item(msg_id, outcome.reply.content, "completed"))
        output += [
            {
                "type": "function_call",
                "id": f"fc_{c.id}",
                "call_id": c.id,
                "name": c.name,
                "arguments": c.arguments,
                "status": "completed",
            }
            for c in outcome.tool_calls
        ]
        usage = {
            "input_tokens": outcome.prompt_tokens,
            "output_tokens": outcome.completion_tokens,
            "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
            "added_tokens": outcome.added_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        }
    return {
        "id": rid,
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed" if outcome is not None else "in_progress",
        "model": model,
        "output": output,
        "usage": usage,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "temperature": None,
        "top_p": None,
        "tool_choice": "auto",
        "tools": [],
        **extra,
    }


def message_item(msg_id: str, text: str, status: str) -> dict[str, Any]:
    """An assistant ``message`` output item."""
    content = [{"type": "output_text", "text": text, "annotations": []}] if status == "completed" else []
    return {"type": "message", "id": msg_id, "status": status, "role": "assistant", "content": content}


async def stream_events(
    rid: str,
    model: str,
    turns: AsyncGenerator[str | Outcome, None],
    extra: dict[str, Any],
) -> AsyncIterator[str]:
    """The Responses event sequence for one streamed response: one id, ``rid``, from
    ``response.created`` to ``response.completed`` (clients check that it holds)."""
    seq = 0
    msg_id = f"msg_{uuid.uuid4().hex}"

    def event(kind: str, **data: Any) -> str:
        nonlocal seq
        seq += 1
        return f"event: {kind}\ndata: {json.dumps({'type': kind, 'sequence_number': seq, **data})}\n\n"

    where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    text = ""
    try:
        yield event("response.created", response=response_body(rid, model, None, msg_id, extra))
        yield event(
            "response.output_item.added", output_index=0, item=message_item(msg_id, "", "in_progress")
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        yield event("response.content_part.added", part=part, **where)
        async for item in turns:
            if isinstance(item, str):
                text += item
                yield event("response.output_text.delta", delta=item, logprobs=[], **where)
                continue
            final = item.reply.content
            if final.startswith(text) and len(final) > len(text):
                yield event("response.output_text.delta", delta=final[len(text) :], logprobs=[], **where)
            yield event("response.output_text.done", text=final, logprobs=[], **where)
            yield event("response.content_part.done", part={**part, "text": final}, **where)
            yield event(
                "response.output_item.done", output_index=0, item=message_item(msg_id, final, "completed")
            )
            body = response_body(rid, model, item, msg_id, extra)
            for index, call in enumerate(body["output"][1:] if final else body["output"], start=1):
                yield event("response.output_item.added", output_index=index, item=call)
                yield event("response.output_item.done", output_index=index, item=call)
            yield event("response.completed", response=body)
    except DormantError as exc:
        yield event("error", code=exc.code, message=str(exc), param=None)
    finally:
        await turns.aclose()


@router.post("/responses", response_model=None)
async def responses(
    request: Request,
    scope: TenantScope,
    body: ResponsesRequest,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key", max_length=200)] = None,
) -> Response:
    """Run the agent on a durable thread; answer or stream in the Responses format.

    An ``Idempotency-Key`` admits the request once: the same key again answers the
    stored reply, and with a different body is refused, 422 ``idempotency_mismatch``.
    Without one, the same input posted twice after one ``previous_response_id`` is one
    continuation too (a retry).
    """
    state = state_of(request)
    rt = state.runtime
    agent = model_agent(rt, body.model)
    thread_id, must_exist = thread_of(scope, body)
    if must_exist:
        await rt.thread(
            thread_id, tenant=scope.tenant_id
        )  # 404 for a response id of no thread of this tenant
    declared = external.from_responses(body.tools) if body.tools else []
    tools_json, names = client_tools(rt, agent, declared)
    media: list[list[PartInput]] = []
    items, answers = parse_input(body, thread_id, agent, idempotency_key, request, tools_json, media)
    items = await with_parts(rt, items, media)  # images and files: checked, then stored
    extra: dict[str, Any] = {"previous_response_id": body.previous_response_id}
    if body.conversation is not None:
        cid = body.conversation if isinstance(body.conversation, str) else body.conversation.id
        extra["conversation"] = {"id": cid}
    try:
        turns = await admitted(
            exchange(state, thread_id, items, answers, tenant=scope.tenant_id, client_tools=names)
        )
    except IdempotencyMismatch:
        raise IdempotencyMismatch(
            f"the Idempotency-Key {idempotency_key!r} was used with a different request body; "
            "send a new key for a new request"
        ) from None
    if body.stream:
        # the id is known before the reply: the thread and the seq the response starts after
        try:
            start = (await rt.thread(thread_id, tenant=scope.tenant_id)).last_seq
        except NotFound:
            start = 0
        rid = response_id(scope, thread_id, start + 1)
        return StreamingResponse(
            stream_events(rid, body.model, turns, extra),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )
    try:
        outcome = await until_disconnect(final(turns), request)
    except ClientGone:
        return Response(status_code=499)  # nobody to answer; the turn commits all the same
    rid = response_id(scope, thread_id, outcome.reply.seq)
    return JSONResponse(response_body(rid, body.model, outcome, f"msg_{outcome.reply.seq}", extra))
