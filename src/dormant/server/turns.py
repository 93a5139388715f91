"""One request-response exchange on a durable thread, for the OpenAI-compatible endpoints.

:func:`exchange` admits inputs (and answers open tool calls), then follows the
thread through the hub until the agent's turn ends, yielding live text as it
streams and finally an :class:`Outcome`. The turn ends when the newest message is
an assistant reply without tool calls (``stop``; ``length`` when the output cap cut
it), or an assistant reply that called one of the client's own tools (``client_tools``,
:mod:`dormant.tools.external`) not answered yet (``tool_calls``, those calls only: the
agent's own calls are the dispatcher's, and the turn waits for them). A failed thread
raises :class:`~dormant.errors.ModelError` with its error.

Nothing is kept in memory but the messages of this one turn (capped by
``MAX_TURN_MESSAGES``): the thread, its history and the answers stay in the store.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass

from ..errors import ModelError, NotFound, ShuttingDown, UsageError
from ..records import Message, NewInput, ToolCall
from ..tokens import DEFAULT_ENCODING, count_text
from .openai_waits import answer_questions, waits_of_turn
from .state import ServerState

#: Most messages one turn may add before the exchange gives up (a runaway agent).
MAX_TURN_MESSAGES = 256
#: Newest messages searched for an input that was already consumed (a retried request).
LOOKBACK = 256


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """How a turn ended: the final assistant message, open calls, token counts."""

    thread_id: str
    reply: Message
    finish_reason: str
    tool_calls: tuple[ToolCall, ...]
    #: what the model read for this turn, as its server counted it (summed over the
    #: turn's model calls); the added messages' count when the server sent no usage
    prompt_tokens: int
    completion_tokens: int
    #: tokens of the messages this request added (dormant's count)
    added_tokens: int = 0


@dataclass(frozen=True, kw_only=True)
class Answer:
    """A client's answer to an open tool call."""

    call_id: str
    content: str


def tokens_of(texts: Sequence[str]) -> int:
    """Tokens of ``texts`` in the default encoding (the usage figures)."""
    return sum(count_text(t, DEFAULT_ENCODING) for t in texts if t)


async def _anchor(
    state: ServerState, thread_id: str, tenant: str, input_ids: set[int], call_ids: set[str]
) -> int | None:
    """The seq before the newest message made from one of ``input_ids`` or answering one of
    ``call_ids`` among the last :data:`LOOKBACK` messages (a repeated request), or None."""
    page = await state.runtime.history(thread_id, limit=LOOKBACK, newest_first=True, tenant=tenant)
    for message in page.items:
        if message.input_id in input_ids or (message.role == "tool" and message.tool_call_id in call_ids):
            return message.seq - 1
    return None


async def exchange(
    state: ServerState,
    thread_id: str,
    items: Sequence[NewInput],
    answers: Sequence[Answer] = (),
    *,
    tenant: str,
    client_tools: frozenset[str] = frozenset(),
) -> AsyncGenerator[str | Outcome | None, None]:
    """Admit ``items`` and ``answers`` to stored thread ``thread_id`` of ``tenant``, then
    yield None once they are durable (so a caller can answer a refused admission with its
    own status before it starts a stream: :func:`admitted`), the agent's live text and,
    last, the :class:`Outcome`. Raises ModelError after the reply timeout, ShuttingDown
    (503) at once when the server stops."""
    rt = state.runtime
    if not items and not answers:
        raise UsageError("nothing new to send: the messages were all seen before")
    if items:
        await state.quotas.admit(rt, thread_id, tenant, len(items))
    async with state.hub.subscribe(thread_id) as sub:
        try:
            start = (await rt.thread(thread_id, tenant=tenant)).last_seq
        except NotFound:
            start = 0
        # the next user message answers an open ask_user question (the turn follows its answer)
        items, answered_now, answered_before = await answer_questions(rt, thread_id, items, tenant=tenant)
        call_ids = answered_now | answered_before
        repeated = [False] * len(answered_now) + [True] * len(answered_before)
        for answer in answers:
            given = await rt.post_tool_result(thread_id, answer.call_id, answer.content, tenant=tenant)
            call_ids.add(answer.call_id)
            repeated.append(given.duplicate)
        admissions = await rt.admit(items, tenant=tenant) if items else []
        input_ids = {a.input_id for a in admissions}
        seen = [a.duplicate for a in admissions] + repeated
        if seen and all(seen):  # nothing new: replay the turn that followed it
            anchor = await _anchor(state, thread_id, tenant, input_ids, call_ids)
            start = start if anchor is None else anchor  # seq 0 is an anchor too
        yield None  # durable: the admission's errors are behind us
        prompt = tokens_of([i.content for i in items] + [a.content for a in answers])
        found = False
        turn: list[Message] = []
        try:
            async with asyncio.timeout(state.config.reply_timeout_s):
                while True:
                    sub.wake.clear()
                    page = await rt.history(thread_id, cursor=str(start), limit=64, tenant=tenant)
                    for message in page.items:
                        start = message.seq
                        if not found:
                            found = message.input_id in input_ids or (
                                message.role == "tool" and message.tool_call_id in call_ids
                            )
                            continue
                        turn.append(message)
                        if len(turn) > MAX_TURN_MESSAGES:
                            raise ModelError(f"the agent wrote over {MAX_TURN_MESSAGES} messages in one turn")
                    if page.next_cursor is not None:
                        continue
                    for text in sub.take():
                        yield text
                    thread = await rt.thread(thread_id, tenant=tenant)
                    if thread.status == "failed":
                        raise ModelError(f"the thread failed: {thread.error}", retryable=False)
                    last = turn[-1] if turn else None
                    if last is not None and last.role == "assistant" and not last.tool_calls:
                        reason = "length" if last.cut else "stop"  # cut by the output cap
                        yield _outcome(thread_id, last, reason, (), prompt, turn)
                        return
                    waiting = (
                        await waits_of_turn(rt, thread_id, turn, tenant=tenant) if thread.awaiting else None
                    )
                    if waiting is not None:  # a call or question of the turn waits for a person
                        yield _outcome(thread_id, waiting, "stop", (), prompt, turn)
                        return
                    asked = open_client_calls(turn, client_tools)
                    if asked is not None:
                        yield _outcome(thread_id, asked[0], "tool_calls", asked[1], prompt, turn)
                        return
                    await sub.wake.wait()
                    if state.hub.closing:
                        raise ShuttingDown(
                            "the server is shutting down; the input is durable and will be answered "
                            "(retry, or read it from the thread's messages)"
                        )
        except TimeoutError:
            raise ModelError(
                f"no reply within {state.config.reply_timeout_s:g}s; the input is durable and will be "
                "answered (read it from the thread's messages)"
            ) from None


def open_client_calls(
    turn: Sequence[Message], client_tools: frozenset[str]
) -> tuple[Message, tuple[ToolCall, ...]] | None:
    """The newest assistant message of ``turn`` and its calls to ``client_tools`` that no
    later message of ``turn`` answers, or None when there are none (the client has
    nothing to run: the turn goes on)."""
    if not client_tools:
        return None
    for index in range(len(turn) - 1, -1, -1):
        message = turn[index]
        if message.role != "assistant":
            continue
        answered = {m.tool_call_id for m in turn[index + 1 :] if m.role == "tool"}
        calls = tuple(c for c in message.tool_calls if c.name in client_tools and c.id not in answered)
        return (message, calls) if calls else None
    return None


async def admitted(
    turns: AsyncGenerator[str | Outcome | None, None],
) -> AsyncGenerator[str | Outcome, None]:
    """Run ``turns`` (an :func:`exchange`) to its admission, raising what admission raised,
    and return the rest of it: live text, then the outcome. The exchange is closed when
    the returned iterator is (or ends)."""
    first = await anext(turns)
    assert first is None

    async def rest() -> AsyncGenerator[str | Outcome, None]:
        try:
            async for item in turns:
                if item is not None:
                    yield item
        finally:
            await turns.aclose()

    return rest()


async def final(turns: AsyncIterator[str | Outcome]) -> Outcome:
    """The :class:`Outcome` at the end of ``turns`` (live text skipped)."""
    outcome = None
    async for item in turns:
        if isinstance(item, Outcome):
            outcome = item
    assert outcome is not None
    return outcome


def _outcome(
    thread_id: str,
    last: Message,
    reason: str,
    calls: tuple[ToolCall, ...],
    prompt: int,
    turn: list[Message],
) -> Outcome:
    written = [m.content for m in turn if m.role == "assistant"]
    written += [c.arguments for m in turn for c in m.tool_calls]
    counted = [m.usage for m in turn if m.role == "assistant" and m.usage is not None]
    return Outcome(
        thread_id=thread_id,
        reply=last,
        finish_reason=reason,
        tool_calls=calls,
        prompt_tokens=sum(u.prompt for u in counted) if counted else prompt,
        completion_tokens=sum(u.completion for u in counted) if counted else tokens_of(written),
        added_tokens=prompt,
    )
