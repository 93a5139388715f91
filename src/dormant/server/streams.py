"""``GET /v1/threads/{id}/events``: a thread's events as a resumable server-sent event stream.

Events:

* ``message`` (id: the message's seq): every message of the thread's own history,
  user text, assistant replies with their tool calls, tool results;
* ``status`` (id: the last seq sent): the thread's status, open calls and error,
  sent first and whenever they change;
* ``delta`` (id: ``<last seq>:<offset>``): model text of a slice running in this
  process, as it streams (not durable: dropped once the slice commits its messages);
* ``rollback`` (id: the last seq sent): the live text sent since that seq is void (a
  slice interrupted by an input sent with ``strategy=rollback``);
* ``progress`` (no id): a tool call running in this process reported progress (an MCP
  server's progress notifications, at most one per call every 0.25 s): ``call_id``,
  ``progress``, ``total`` (null when unknown), ``message``; not durable;
* ``error``: why the server ends the stream (a slow client, a deleted thread).

``?token=`` (from ``POST /v1/threads/{id}/events/token``, see :mod:`.tokens`) may stand
in for the bearer key, for a browser's ``EventSource``.

``Last-Event-ID`` (or ``?after=SEQ``) resumes after that seq: the history is read
from the store in pages of ``replay_page`` messages and ``replay_page_bytes`` of content
(one message at least), so replay needs nothing but the store and holds one bounded page
at a time. A heartbeat comment goes out every
``heartbeat_s`` seconds; a write blocked over ``stream_send_timeout_s``, or more
than ``stream_queue_bytes`` of live text waiting, drops the client.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from sse_starlette import EventSourceResponse, ServerSentEvent

from ..errors import DormantError, UsageError
from .hub import Subscriber
from .routes import ERRORS
from .schemas import MessageOut
from .state import ServerState, state_of
from .stream_auth import StreamScope

router = APIRouter(prefix="/v1", tags=["events"], responses=ERRORS)

_EVENT_ID = re.compile(r"^([0-9]{1,18})(?::[0-9]{1,18})?$")


def resume_after(last_event_id: str | None, after: int | None) -> int:
    """The seq to resume after: from ``Last-Event-ID`` (``SEQ`` or ``SEQ:OFFSET``), else ``after``."""
    if last_event_id:
        match = _EVENT_ID.match(last_event_id.strip())
        if match is None:
            raise UsageError(f"bad Last-Event-ID {last_event_id!r}: expected SEQ or SEQ:OFFSET")
        return int(match.group(1))
    return after or 0


async def thread_events(
    state: ServerState, thread_id: str, after: int, sub: Subscriber, *, tenant: str
) -> AsyncIterator[ServerSentEvent]:
    """The event stream of stored thread ``thread_id`` (of ``tenant``) after seq ``after``,
    until the client leaves."""
    rt = state.runtime
    page_size = state.config.replay_page
    mark: tuple[str, int, str | None] | None = None
    offset = 0  # characters of live text sent since the last durable message
    try:
        while True:
            sub.wake.clear()  # before reading: a change during the reads wakes the next round
            sent = False
            while True:
                page = await rt.history(
                    thread_id,
                    cursor=str(after),
                    limit=page_size,
                    max_bytes=state.config.replay_page_bytes,
                    tenant=tenant,
                )
                for message in page.items:
                    yield ServerSentEvent(
                        data=MessageOut.of(message).model_dump_json(), event="message", id=str(message.seq)
                    )
                    after = message.seq
                    sent = True
                if page.next_cursor is None:
                    break
            if sent:
                sub.take()  # live text of a slice that has committed since
                offset = 0
            thread = await rt.thread(thread_id, tenant=tenant)
            now = (thread.status, thread.awaiting, thread.error)
            if now != mark:
                mark = now
                data = {"status": thread.status, "awaiting": thread.awaiting, "error": thread.error}
                yield ServerSentEvent(data=json.dumps(data), event="status", id=str(after))
            if state.hub.closing:
                data = {
                    "code": "shutting_down",
                    "message": "the server is stopping; resume with Last-Event-ID",
                }
                yield ServerSentEvent(data=json.dumps(data), event="error")
                return
            if sub.dropped is not None:
                yield ServerSentEvent(
                    data=json.dumps({"code": "slow_client", "message": sub.dropped}), event="error"
                )
                return
            if sub.rolled_back:
                sub.rolled_back = False
                data = {"after": after, "discarded": offset}
                offset = 0
                yield ServerSentEvent(data=json.dumps(data), event="rollback", id=str(after))
            for event in sub.take_progress():
                shown: dict[str, object] = {
                    "call_id": event.call_id,
                    "progress": event.progress,
                    "total": event.total,
                    "message": event.message,
                }
                yield ServerSentEvent(data=json.dumps(shown), event="progress")
            texts = sub.take()
            if texts:
                text = "".join(texts)
                offset += len(text)
                yield ServerSentEvent(data=json.dumps({"text": text}), event="delta", id=f"{after}:{offset}")
                continue
            await sub.wake.wait()
    except DormantError as exc:  # the thread was deleted, the store failed: say so and end
        yield ServerSentEvent(data=json.dumps({"code": exc.code, "message": str(exc)}), event="error")


@router.get(
    "/threads/{thread_id}/events",
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "server-sent events"}},
)
async def events(
    request: Request,
    scope: StreamScope,
    thread_id: str,
    after: Annotated[int | None, Query(ge=0, le=10**18, description="resume after this seq")] = None,
    last_event_id: Annotated[str | None, Header(alias="Last-Event-ID", max_length=64)] = None,
) -> EventSourceResponse:
    """Stream the thread's events; resumable with ``Last-Event-ID`` or ``?after=SEQ``.

    Authenticated by the bearer API key, or by ``?token=`` (``POST .../events/token``)
    for a browser's ``EventSource``, which cannot send headers."""
    state = state_of(request)
    inner = scope.inner(thread_id)
    start = resume_after(last_event_id, after)
    await state.runtime.thread(inner, tenant=scope.tenant_id)  # 404 before the stream starts
    config = state.config

    async def stream() -> AsyncIterator[ServerSentEvent]:
        async with state.hub.subscribe(inner) as sub:
            async for event in thread_events(state, inner, start, sub, tenant=scope.tenant_id):
                yield event

    state.hub.check_room()  # 429 before the stream starts
    return EventSourceResponse(
        stream(),
        ping=config.heartbeat_s,
        send_timeout=config.stream_send_timeout_s,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )
