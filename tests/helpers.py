"""Shared test helpers: a controllable clock, history readers and the invariant checks
that every end-to-end test (integration, faults) applies to what a store holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from dormant.records import CommitPlan, Message, NewCall, NewInput, ToolCall, ViewLimits
from dormant.slices.step import input_message
from dormant.store.base import Store


class FakeClock:
    """A clock the test moves by hand; pass it as ``clock=`` to a store."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        """Move the clock forward and return the new time."""
        self.now += seconds
        return self.now


async def eventually(
    predicate: Callable[[], Awaitable[bool]], *, timeout: float = 10.0, interval: float = 0.01
) -> None:
    """Poll ``predicate`` until it holds; ``TimeoutError`` after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not await predicate():  # noqa: ASYNC110 - the store has no event to wait on
            await asyncio.sleep(interval)


async def all_messages(store: Store, thread_id: str) -> list[Message]:
    """A thread's whole history, read page by page (oldest first)."""
    out: list[Message] = []
    cursor: str | None = None
    while True:
        page = await store.history(thread_id, cursor=cursor, limit=1000)
        out.extend(page.items)
        if page.next_cursor is None:
            return out
        cursor = page.next_cursor


@dataclass
class HistoryReport:
    """What :func:`check_history` found in one thread's history."""

    user_contents: list[str] = field(default_factory=list)
    input_ids: list[int] = field(default_factory=list)
    tool_calls: int = 0


def check_history(messages: Sequence[Message], *, last_seq: int | None = None) -> HistoryReport:
    """Assert the structural rules of one thread's history and summarise it.

    * seq numbers are 1, 2, ... with no gap (and end at ``last_seq`` when given);
    * no input became a message twice;
    * every assistant tool call id is unique and answered by exactly one tool
      message, which comes after the call; no tool message answers an unknown call;
    * between a tool call and its results only tool messages appear (nothing lands
      between a call and its answer).
    """
    report = HistoryReport()
    assert [m.seq for m in messages] == list(range(1, len(messages) + 1)), "seq gap or disorder"
    if last_seq is not None:
        assert len(messages) == last_seq, f"thread last_seq {last_seq} != {len(messages)} messages"
    open_calls: set[str] = set()
    seen_calls: set[str] = set()
    answered: set[str] = set()
    for m in messages:
        if m.input_id is not None:
            assert m.input_id not in report.input_ids, f"input {m.input_id} recorded twice"
            report.input_ids.append(m.input_id)
        if m.role == "tool":
            call_id = m.tool_call_id
            assert call_id is not None, f"tool message {m.seq} has no call id"
            assert call_id in seen_calls, f"tool result {call_id} answers no earlier call"
            assert call_id not in answered, f"tool call {call_id} answered twice"
            answered.add(call_id)
            open_calls.discard(call_id)
            continue
        assert not open_calls, f"message {m.seq} ({m.role}) lands before results of {sorted(open_calls)}"
        if m.role == "user":
            report.user_contents.append(m.content)
        for call in m.tool_calls:
            assert call.id not in seen_calls, f"tool call id {call.id} used twice"
            seen_calls.add(call.id)
            open_calls.add(call.id)
            report.tool_calls += 1
    assert seen_calls == answered, f"unanswered tool calls: {sorted(seen_calls - answered)}"
    return report


async def open_calls(
    store: Store, thread_id: str, calls: Sequence[NewCall], *, agent: str = "a", key: str = "go"
) -> None:
    """Make ``thread_id`` (created with ``agent``) ask for ``calls``: one slice that consumes
    a user input and commits an assistant message whose tool calls go to the outbox."""
    await store.admit([NewInput(thread_id=thread_id, kind="user", dedup_key=key, content="go", agent=agent)])
    claims = [c for c in await store.claim_threads("setup", 1000, 30.0) if c.thread_id == thread_id]
    assert claims, f"thread {thread_id} was not claimable"
    load = await store.load_slice(claims[0], ViewLimits())
    seq = load.thread.last_seq
    messages = []
    for item in load.inputs:
        seq += 1
        messages.append(input_message(item, seq, 0.0))
    tool_calls = tuple(ToolCall(id=c.call_id, name=c.tool, arguments=c.arguments) for c in calls)
    messages.append(Message(seq=seq + 1, role="assistant", content="", tool_calls=tool_calls))
    await store.commit_slice(
        CommitPlan(
            thread_id=thread_id,
            token=claims[0].token,
            consumed=tuple(i.id for i in load.inputs),
            messages=tuple(messages),
            calls=tuple(calls),
            awaiting=load.thread.awaiting + len(calls),
        )
    )


#: A binding secret for tests that make binding keys without a store (``memory.binding.bind``).
KEY_SECRET = b"test-binding-secret-0123456789abcdef"
