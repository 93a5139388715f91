"""Small builders for contract tests: inputs, claims and commit plans."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from dormant.records import (
    Claim,
    CommitPlan,
    Message,
    NewCall,
    NewInput,
    NewThread,
    Priority,
    SliceLoad,
    Summary,
    ToolCall,
    ViewLimits,
)
from dormant.slices.step import input_message
from dormant.store.base import Store
from dormant.tokens import TokenCounter

LEASE = 30.0
COUNTER = TokenCounter("o200k_base")


def user(thread_id: str, key: str, content: str = "", **overrides: Any) -> NewInput:
    """A user input that creates its thread (agent ``a``) when missing."""
    values: dict[str, Any] = {
        "thread_id": thread_id,
        "kind": "user",
        "dedup_key": key,
        "content": content or f"text of {key}",
        "agent": "a",
    }
    values.update(overrides)
    return NewInput(**values)


def result(thread_id: str, call_id: str, content: str = "r", **overrides: Any) -> NewInput:
    """A tool result input answering ``call_id``."""
    values: dict[str, Any] = {
        "thread_id": thread_id,
        "kind": "tool_result",
        "dedup_key": call_id,
        "content": content,
        "call_id": call_id,
        "tool_name": "f",
    }
    values.update(overrides)
    return NewInput(**values)


async def claim(store: Store, thread_id: str, *, worker: str = "w1", lease_s: float = LEASE) -> Claim:
    """Claim ``thread_id``, which must be ready; other ready threads are given back."""
    claims = await store.claim_threads(worker, 1000, lease_s)
    mine = [c for c in claims if c.thread_id == thread_id]
    for c in claims:
        if c.thread_id != thread_id:
            await store.release(c)
    assert mine, f"{thread_id} is not claimable (ready: {[c.thread_id for c in claims]})"
    return mine[0]


async def take(
    store: Store, thread_id: str, limits: ViewLimits | None = None, **kwargs: Any
) -> tuple[Claim, SliceLoad]:
    """Claim ``thread_id`` and load its slice."""
    c = await claim(store, thread_id, **kwargs)
    return c, await store.load_slice(c, limits or ViewLimits())


def plan(
    c: Claim,
    load: SliceLoad,
    *,
    reply: str | None = "ok",
    calls: Sequence[NewCall] = (),
    threads: Sequence[NewThread] = (),
    admissions: Sequence[NewInput] = (),
    consumed: Sequence[int] | None = None,
    extra: int = 0,
    summary: Summary | None = None,
) -> CommitPlan:
    """The plan of a slice that turns every loaded input into a message, then (optionally)
    replies, asking for ``calls``; ``extra`` adds that many more assistant messages."""
    seq = load.thread.last_seq
    messages: list[Message] = []
    awaiting = load.thread.awaiting
    for item in load.inputs:
        seq += 1
        messages.append(input_message(item, seq, 0.0))
        if item.kind == "tool_result":
            awaiting = max(0, awaiting - 1)
    if reply is not None:
        seq += 1
        tool_calls = tuple(ToolCall(id=x.call_id, name=x.tool, arguments=x.arguments) for x in calls)
        messages.append(Message(seq=seq, role="assistant", content=reply, tool_calls=tool_calls))
    for n in range(extra):
        seq += 1
        messages.append(Message(seq=seq, role="assistant", content=f"extra {n}"))
    return CommitPlan(
        thread_id=c.thread_id,
        token=c.token,
        consumed=tuple(i.id for i in load.inputs) if consumed is None else tuple(consumed),
        messages=tuple(msgspec.structs.replace(m, tokens=COUNTER.message(m)) for m in messages),
        calls=tuple(calls),
        threads=tuple(threads),
        admissions=tuple(admissions),
        awaiting=awaiting + len(calls),
        summary=summary,
    )


def call(call_id: str, tool: str = "f", *, idempotent: bool = False, arguments: str = "{}") -> NewCall:
    return NewCall(call_id=call_id, tool=tool, arguments=arguments, idempotent=idempotent)


async def turn(store: Store, thread_id: str, key: str, **plan_kwargs: Any) -> CommitPlan:
    """Admit a user input to ``thread_id`` and run one slice over it; return the plan."""
    await store.admit([user(thread_id, key)])
    c, load = await take(store, thread_id)
    committed = plan(c, load, **plan_kwargs)
    await store.commit_slice(committed)
    return committed


async def ready_ids(store: Store, *, worker: str = "probe") -> list[str]:
    """Which threads are claimable now (claims them, then gives them back)."""
    claims = await store.claim_threads(worker, 1000, LEASE)
    for c in claims:
        await store.release(c)
    return [c.thread_id for c in claims]


async def pending_inputs(store: Store, thread_id: str) -> list[str]:
    """Dedup keys of the consumable inputs of ``thread_id`` (claims, loads, releases)."""
    claims = await store.claim_threads("probe", 1000, LEASE)
    try:
        mine = [c for c in claims if c.thread_id == thread_id]
        if not mine:
            return []
        load = await store.load_slice(mine[0], ViewLimits())
        return [i.dedup_key for i in load.inputs]
    finally:
        for c in claims:
            await store.release(c)


P = Priority
