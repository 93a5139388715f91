"""Retention of compaction summaries on every backend: superseded summaries go once
nothing can read them; the newest stay, and so does any summary a child inherits or a
fork at a still-stored message would."""

from __future__ import annotations

import pytest

from dormant.errors import UsageError
from dormant.retention.policy import RetentionPolicy, gc_round
from dormant.store.base import Store
from tests.helpers import FakeClock, all_messages

from .support import plan, take, turn, user
from .test_summaries import summary_of


async def summarized(store: Store, thread: str, turns: int) -> None:
    """``turns`` plain turns (user, reply: seqs 2k-1, 2k); each after the first also
    writes a summary of everything before it, so summaries cover (and were made at)
    2, 4, ..., 2 * (turns - 1)."""
    await turn(store, thread, "k1")
    for n in range(2, turns + 1):
        await store.admit([user(thread, f"k{n}")])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load, summary=summary_of(load, load.thread.last_seq)))


async def starts_from(store: Store, thread: str) -> int | None:
    """What the summary the thread's next view starts from covers (None: no summary)."""
    await store.admit([user(thread, f"probe{thread}")])
    c, load = await take(store, thread)
    await store.release(c)
    return load.summary.upto_seq if load.summary is not None else None


async def fork_inherits(store: Store, thread: str, at_seq: int) -> int | None:
    """What the summary a fork of ``thread`` at ``at_seq`` starts from covers."""
    fork = await store.fork_thread(thread, f"{thread}~{at_seq}", at_seq, {})
    return await starts_from(store, fork.id)


async def pruned_history(store: Store, thread: str) -> None:
    """Delete the runs the newest summary covers (seqs 1..10 of a 6-turn thread)."""
    assert await store.prune_history(thread, keep_runs=1, keep_tool_calls=1, limit=100) == 10
    assert [m.seq for m in await all_messages(store, thread)] == [11, 12]


async def test_superseded_summaries_go_and_the_newest_stay(store: Store) -> None:
    await summarized(store, "t", 6)  # summaries up to 2, 4, 6, 8, 10
    assert await store.prune_summaries("t", keep=2, limit=100) == 0, (
        "every stored message is a place a fork could inherit a summary from"
    )
    await pruned_history(store, "t")  # the oldest message is now 11
    messages, thread = await all_messages(store, "t"), await store.get_thread("t")
    # 10 and 8 are the 2 newest; 6, 4 and 2 are superseded by one made before seq 11
    assert await store.prune_summaries("t", keep=2, limit=2) == 2, "bounded: the oldest 2"
    assert await store.prune_summaries("t", keep=2, limit=2) == 1
    assert await store.prune_summaries("t", keep=2, limit=2) == 0
    assert await all_messages(store, "t") == messages, "no message changes"
    assert await store.get_thread("t") == thread, "nor the thread"
    assert await starts_from(store, "t") == 10, "the thread's views start from its newest"
    assert await fork_inherits(store, "t", 11) == 10
    assert await fork_inherits(store, "t", 9) == 8, "the 2 newest stay"
    assert await fork_inherits(store, "t", 7) is None, "6 went, and 4 and 2 before it"
    with pytest.raises(UsageError):
        await store.prune_summaries("t", keep=0, limit=1)


async def test_the_newest_n_stay(store: Store) -> None:
    await summarized(store, "t", 6)
    await pruned_history(store, "t")
    assert await store.prune_summaries("t", keep=4, limit=100) == 1, "only 2 is past the 4 newest"
    assert await fork_inherits(store, "t", 5) == 4
    assert await fork_inherits(store, "t", 3) is None


async def test_a_summary_a_child_inherits_stays(store: Store) -> None:
    await summarized(store, "p", 6)
    await pruned_history(store, "p")
    # a child spawned at seq 5 (between the summaries made at 4 and at 6) inherits 4
    child = await store.fork_thread("p", "p/c", 5, {})
    assert await starts_from(store, child.id) == 4
    assert await store.prune_summaries("p", keep=1, limit=100) == 3, "6 and 8 go, and 2; 4 stays"
    assert await starts_from(store, child.id) == 4, "the child's view still starts from it"
    assert await starts_from(store, "p") == 10
    assert await fork_inherits(store, "p", 9) == 4, "8 and 6 went"
    assert await fork_inherits(store, "p", 3) is None, "2 went"


async def test_a_gc_round_prunes_summaries_and_counts_them(store: Store, clock: FakeClock) -> None:
    await summarized(store, "t", 6)
    policy = RetentionPolicy.long_run(full_tool_calls=1, full_runs=1, metric_runs=0, keep_summaries=2)
    done = await gc_round(store, policy, None, clock.now)
    assert done.deleted >= 10, "the covered runs of history went"
    assert done.summaries == 3, "then the summaries superseded before the oldest message left"
    assert (await gc_round(store, policy, None, clock.now)).summaries == 0
    assert await fork_inherits(store, "t", 9) == 8
    assert await fork_inherits(store, "t", 7) is None
