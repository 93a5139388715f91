"""``POST /v1/chat/completions``: OpenAI's Chat Completions onto durable threads.

The session is named by the request's ``user`` field or the ``X-Dormant-Session``
header; it maps to the tenant's thread ``chat-<hash of the session>`` (answered in
the ``X-Dormant-Thread`` header). Clients resend the whole conversation each time;
the server appends only what it has not seen: each user message is admitted with a
dedup key that is the hash of the conversation prefix ending at it, so messages
already admitted are duplicates and change nothing, and a ``tool`` message answers
the open call it names (the first answer wins). ``system`` messages are ignored: the
agent has its own system prompt. ``model`` names the agent.

``tools`` are the client's own (:mod:`dormant.tools.external`): stored with the request's
user messages, shown to the model beside the agent's tools; a call to one ends the
answer with ``finish_reason="tool_calls"`` and waits, durably, for the ``tool`` message
of a later request of the session. A request that declares tools needs a session.

Without a session the request is stateless: a scratch thread gets the user messages,
answers, and is deleted.

``usage`` is what the model server counted for the turn: ``prompt_tokens`` the whole
prompt the model read (summed over the turn's model calls), ``completion_tokens`` what
it wrote; ``added_tokens`` (an extra field) the tokens of the messages this request
added. A server that reports no usage gets dormant's counts instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..errors import DormantError, UsageError, http_status
from ..parts import File, Image, PartInput
from ..records import NewInput
from ..tenants.scope import Scope
from ..tools import external
from . import openai_errors
from .inflight import ClientGone, until_disconnect
from .openai_input import client_tools, content_text, with_parts
from .openai_models import model_agent
from .routes import ERRORS, TenantScope, check_size
from .state import ServerState, state_of
from .turns import Answer, Outcome, admitted, exchange, final

router = APIRouter(prefix="/v1", tags=["openai"], responses=ERRORS)


class ChatMessage(BaseModel):
    """One message of a Chat Completions conversation (text parts only)."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = Field(None, max_length=256)


class ChatRequest(BaseModel):
    """A Chat Completions request; fields this server does not use are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(..., max_length=256)
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=10_000)
    stream: bool = False
    user: str | None = Field(None, max_length=256)
    tools: list[dict[str, Any]] | None = None


def text_of(message: ChatMessage, where: str = "message") -> str:
    """A message's text: its string content, or its text parts joined; a part that is not
    text (an image, audio, a file) is refused, 400 (:mod:`.openai_input`)."""
    return content_text(message.content, where)


def unseen(
    messages: list[ChatMessage],
    thread_id: str,
    agent: str,
    request: Request,
    tools: str | None = None,
    media: list[list[PartInput]] | None = None,
) -> tuple[list[NewInput], list[Answer], str]:
    """The inputs and tool answers of a conversation, keyed by the hash of their prefix,
    and the hash of the whole conversation (what makes two requests identical). With
    ``media``, the images and files of each user input are decoded into it (one list per
    input, stored by :func:`~.openai_input.with_parts`)."""
    chain = hashlib.sha256()
    items: list[NewInput] = []
    answers: list[Answer] = []
    for index, message in enumerate(messages):
        found: list[PartInput] = []
        where = f"messages.{index}"
        text = content_text(message.content, where, found if message.role == "user" else None)
        if message.role in ("system", "developer"):
            continue
        calls = json.dumps(message.tool_calls or [], sort_keys=True)
        chain.update(json.dumps([message.role, text, message.tool_call_id, calls]).encode())
        for part in found:  # the same text with other images is another input
            source = part.source if isinstance(part, Image | File) else b""
            chain.update(hashlib.sha256(source if isinstance(source, bytes) else b"").digest())
        if media is not None and message.role == "user":
            media.append(found)
        if message.role == "user":
            check_size(request, text)
            key = f"chat:{chain.hexdigest()[:48]}"
            items.append(
                NewInput(
                    thread_id=thread_id, kind="user", dedup_key=key, content=text, agent=agent, tools=tools
                )
            )
        elif message.role == "tool":
            if not message.tool_call_id:
                raise UsageError("a tool message needs its tool_call_id")
            check_size(request, text)
            answers.append(Answer(call_id=message.tool_call_id, content=text))
    return items, answers, chain.hexdigest()


def session_thread(scope: Scope, session: str) -> str:
    """The stored thread of a chat session."""
    return scope.inner("chat-" + hashlib.sha256(session.encode()).hexdigest()[:32])


def completion(request_id: str, model: str, outcome: Outcome) -> dict[str, Any]:
    """A ``chat.completion`` body."""
    message: dict[str, Any] = {"role": "assistant", "content": outcome.reply.content or None}
    if outcome.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in outcome.tool_calls
        ]
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": outcome.finish_reason, "logprobs": None}
        ],
        "usage": usage(outcome),
    }


def usage(outcome: Outcome) -> dict[str, int]:
    """The ``usage`` object."""
    return {
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "total_tokens": outcome.prompt_tokens + outcome.completion_tokens,
        "added_tokens": outcome.added_tokens,
    }


def chunk(request_id: str, model: str, delta: dict[str, Any], finish: str | None = None) -> str:
    """One ``chat.completion.chunk`` as an SSE data line."""
    body = {
        "id": request_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
    }
    return f"data: {json.dumps(body)}\n\n"


async def stream_chunks(
    request_id: str,
    model: str,
    turns: AsyncGenerator[str | Outcome, None],
    cleanup: ServerState | None,
    scratch: str,
    tenant: str,
) -> AsyncIterator[str]:
    """The SSE body of a streamed completion: live text, then what the live text missed, the
    finish reason, tool calls and usage, then ``[DONE]``. An error ends it with an error event."""
    sent = ""
    try:
        yield chunk(request_id, model, {"role": "assistant", "content": ""})
        async for item in turns:
            if isinstance(item, str):
                sent += item
                yield chunk(request_id, model, {"content": item})
                continue
            final = item.reply.content
            if final.startswith(sent) and len(final) > len(sent):
                yield chunk(request_id, model, {"content": final[len(sent) :]})
            delta: dict[str, Any] = {}
            if item.tool_calls:
                delta["tool_calls"] = [
                    {
                        "index": i,
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments},
                    }
                    for i, c in enumerate(item.tool_calls)
                ]
            last = json.loads(chunk(request_id, model, delta, item.finish_reason)[6:])
            last["usage"] = usage(item)
            yield f"data: {json.dumps(last)}\n\n"
        yield "data: [DONE]\n\n"
    except DormantError as exc:
        yield f"data: {json.dumps(openai_errors.shape(exc.code, str(exc), http_status(exc)))}\n\n"
    finally:
        await turns.aclose()
        if cleanup is not None:
            with contextlib.suppress(DormantError):
                await cleanup.runtime.delete_thread(scratch, tenant=tenant)


@router.post("/chat/completions", response_model=None)
async def chat_completions(
    request: Request,
    scope: TenantScope,
    body: ChatRequest,
    session: Annotated[str | None, Header(alias="X-Dormant-Session", max_length=256)] = None,
) -> Response:
    """Run the agent on the conversation; answer or stream in OpenAI's format, with usage.

    A request identical to one already answered (same session, same messages) admits
    nothing and answers the stored reply; identical requests in flight share one wait
    (:mod:`.inflight`). A client that disconnects stops the wait, not the turn.
    """
    state = state_of(request)
    rt = state.runtime
    agent = model_agent(rt, body.model)
    name = session or body.user
    thread_id = session_thread(scope, name) if name else scope.inner(f"scratch-{uuid.uuid4().hex}")
    declared = external.from_chat(body.tools) if body.tools else []
    if declared and not name:
        raise UsageError(
            "tools: a request that declares client tools needs a session (send `user` or the "
            "X-Dormant-Session header), so that its tool messages can answer the calls"
        )
    tools_json, names = client_tools(rt, agent, declared)
    media: list[list[PartInput]] = []
    items, answers, digest = unseen(body.messages, thread_id, agent, request, tools_json, media)
    items = await with_parts(rt, items, media)  # images and files: checked, then stored
    if not name:
        answers = []  # a stateless request has no open calls to answer
    request_id = f"chatcmpl-{uuid.uuid4().hex}"
    headers = {"X-Dormant-Thread": scope.outer(thread_id)}

    async def start() -> AsyncGenerator[str | Outcome, None]:
        return await admitted(
            exchange(state, thread_id, items, answers, tenant=scope.tenant_id, client_tools=names)
        )

    if body.stream:
        cleanup = None if name else state
        try:
            turns = await start()
        except BaseException:
            if not name:
                with contextlib.suppress(DormantError):
                    await rt.delete_thread(thread_id, tenant=scope.tenant_id)
            raise
        return StreamingResponse(
            stream_chunks(request_id, body.model, turns, cleanup, thread_id, scope.tenant_id),
            media_type="text/event-stream",
            headers={**headers, "Cache-Control": "no-store"},
        )

    async def answer() -> Outcome:
        try:
            return await final(await start())
        finally:
            if not name:
                with contextlib.suppress(DormantError):
                    await rt.delete_thread(thread_id, tenant=scope.tenant_id)

    try:
        if name:  # identical requests of one session share the wait
            key = (scope.tenant_id, thread_id, digest, hashlib.sha256(tools_json.encode()).hexdigest())
            outcome = await state.flights.run(key, answer, request)
        else:
            outcome = await until_disconnect(answer(), request)
    except ClientGone:
        return Response(status_code=499)  # nobody to answer; the turn commits all the same
    return JSONResponse(completion(request_id, body.model, outcome), headers=headers)
