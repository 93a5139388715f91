"""Retention: old tool results shrink to their head, the messages (and so the
call/result pairing) stay, the newest results stay whole; bounded per call."""

from __future__ import annotations

import pytest

from dormant.errors import UsageError
from dormant.journal.rules import CheckpointPolicy
from dormant.records import Message
from dormant.retention.policy import NOTE, RetentionPolicy, gc_round
from dormant.store.base import Store
from tests.helpers import FakeClock, all_messages, check_history

from .support import call, plan, result, take, user


async def tool_turns(store: Store, thread: str, count: int, size: int) -> None:
    """``count`` turns of: user input, a call, its (``size``-character) result, a reply."""
    for n in range(count):
        await store.admit([user(thread, f"u{n}")])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load, reply="", calls=[call(f"{thread}-c{n}")]))
        await store.admit([result(thread, f"{thread}-c{n}", f"{n:04d}" + "x" * size)])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load, reply="done"))


def tools(history: list[Message]) -> list[Message]:
    return [m for m in history if m.role == "tool"]


async def test_old_tool_results_keep_their_head_and_every_message_stays(store: Store) -> None:
    await tool_turns(store, "t", 6, 2000)
    before = await all_messages(store, "t")
    await store.admit([user("t", "cached")])
    c, load = await take(store, "t")  # the thread's view is cached now
    await store.release(c)
    assert all(not m.content.endswith(NOTE) for m in load.view)
    cut = await store.shrink_tool_results("t", keep=2, head_chars=100, limit=3)
    assert cut == 3, "bounded by limit"
    cut += await store.shrink_tool_results("t", keep=2, head_chars=100, limit=100)
    assert cut == 4
    after = await all_messages(store, "t")
    assert [(m.seq, m.role, m.tool_call_id) for m in after] == [
        (m.seq, m.role, m.tool_call_id) for m in before
    ]
    check_history(after)  # every call still has exactly one result
    results = tools(after)
    for old in results[:4]:
        assert old.content.endswith(NOTE) and len(old.content) == 100 + len(NOTE)
        assert old.content.startswith(f"{results.index(old):04d}x")
    assert [m.content for m in results[4:]] == [m.content for m in tools(before)[4:]], "newest two whole"
    assert await store.shrink_tool_results("t", keep=2, head_chars=100, limit=100) == 0, "idempotent"
    _, load = await take(store, "t")
    assert sum(m.content.endswith(NOTE) for m in load.view) == 4, "no stale cached view"
    with pytest.raises(UsageError):
        await store.shrink_tool_results("t", keep=0, head_chars=100, limit=1)


async def test_a_gc_round_visits_a_page_of_threads_and_writes_due_checkpoints(
    store: Store, clock: FakeClock
) -> None:
    for thread in ("a", "b", "c"):
        await tool_turns(store, thread, 3, 1000)
    policy = RetentionPolicy.long_run(full_tool_calls=1, head_chars=10, threads_per_round=2)
    first = await gc_round(store, policy, CheckpointPolicy(), clock.now)
    assert (first.threads, first.shrunk, first.cursor) == (2, 4, "b")
    second = await gc_round(store, policy, CheckpointPolicy(), clock.now, first.cursor)
    assert (second.threads, second.shrunk, second.cursor) == (1, 2, None)
    assert first.checkpoints == second.checkpoints == 0, "no state changed: no checkpoint"
    views = [len(m.content) for m in tools(await all_messages(store, "c"))]
    assert views == [10 + len(NOTE), 10 + len(NOTE), 1004]
