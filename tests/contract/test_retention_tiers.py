"""Retention tiers on every backend: blobs collected after a cut, dedup keys past the
horizon, old runs of history (whole runs, covered by a summary), the journal's run
tiers, fork, and the tier sizes."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest

from dormant.errors import NotFound, UsageError
from dormant.records import Message, NewThread, StateChange, Summary
from dormant.retention.policy import NOTE
from dormant.store.base import Store
from dormant.tools.blobs import excerpt
from tests.helpers import FakeClock, all_messages

from .support import call, plan, result, take, turn, user
from .test_retention import tool_turns, tools


def paired(history: Sequence[Message]) -> None:
    """Every tool call in ``history`` has exactly one result in it, and every result its call."""
    calls = [c.id for m in history if m.role == "assistant" for c in m.tool_calls]
    answers = [m.tool_call_id or "" for m in history if m.role == "tool"]
    assert sorted(calls) == sorted(answers), (calls, answers)
    assert len(set(calls)) == len(calls)


async def result_turns(store: Store, thread: str, contents: Sequence[str]) -> None:
    """A plain first turn (a 504-character result), then one turn per content: a user
    input, a call, its result ``content``, a reply."""
    await tool_turns(store, thread, 1, 500)
    for n, content in enumerate(contents):
        await store.admit([user(thread, f"r{n}")])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load, reply="", calls=[call(f"{thread}-r{n}")]))
        await store.admit([result(thread, f"{thread}-r{n}", content)])
        c, load = await take(store, thread)
        await store.commit_slice(plan(c, load, reply="done"))


async def test_a_cut_result_releases_a_blob_no_whole_result_shows(store: Store) -> None:
    await store.admit([user("x", "u"), user("o", "u")])
    a = await store.put_blob("x", [b"a" * 40_000])
    b = await store.put_blob("x", [b"b" * 40_000])
    assert (await store.put_blob("o", [b"b" * 40_000])).ref == b.ref, "thread o refers to b too"
    shown = {ref.ref: excerpt(ref, b"head", b"tail") for ref in (a, b)}
    await result_turns(store, "x", [shown[a.ref], shown[b.ref], shown[a.ref]])
    assert await store.shrink_tool_results("x", keep=1, head_chars=120, limit=10) == 3
    assert await store.read_blob("x", a.ref, 0, 4) == b"aaaa", "the newest whole result still shows a"
    with pytest.raises(NotFound):
        await store.read_blob("x", b.ref, 0, 4)  # x no longer refers to b ...
    assert await store.read_blob("o", b.ref, 0, 4) == b"bbbb", "... but o still does"
    after = tools(await all_messages(store, "x"))
    assert [m.content.endswith(NOTE) for m in after] == [True, True, True, False]
    assert after[1].content.startswith(shown[a.ref][:100]), "the excerpt still names its blob"


async def test_a_blob_no_thread_refers_to_is_deleted(store: Store) -> None:
    await store.admit([user("solo", "u")])
    a = await store.put_blob("solo", [b"z" * 30_000])
    await result_turns(store, "solo", [excerpt(a, b"head", b"tail"), "plain"])
    assert await store.shrink_tool_results("solo", keep=1, head_chars=100, limit=10) == 2
    with pytest.raises(NotFound):
        await store.read_blob("solo", a.ref, 0, 4)
    assert (await store.retention_sizes()).blobs == 0, "no thread refers to it: its chunks are gone"


async def test_dedup_keys_past_the_horizon_are_forgotten(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t", "old")])
    c, load = await take(store, "t")
    await store.commit_slice(plan(c, load))
    await store.admit([user("t", "pending")])
    clock.advance(8 * 86400)
    await store.admit([user("t", "new")])
    before = clock.now - 7 * 86400
    assert await store.prune_dedup_keys(before=before, limit=100) == 1, "only the consumed old key"
    assert await store.prune_dedup_keys(before=before, limit=100) == 0
    (again,) = await store.admit([user("t", "old")])
    assert not again.duplicate, "a redelivery older than the horizon is admitted again"
    (pending,) = await store.admit([user("t", "pending")])
    (new,) = await store.admit([user("t", "new")])
    assert pending.duplicate and new.duplicate, "a pending input's key and a recent key stay"
    with pytest.raises(UsageError):
        await store.prune_dedup_keys(before=before, limit=0)


async def test_old_runs_covered_by_a_summary_are_deleted_whole(store: Store) -> None:
    await tool_turns(store, "t", 6, 100)  # runs 1-6: seqs 4r-3 .. 4r (user, call, result, reply)
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=1, limit=100) == 0, "no summary"
    summary = Summary(
        thread_id="t", upto_seq=16, content="runs 1-4", tokens=3, covered_tokens=0, made_at_seq=24
    )
    await turn(store, "t", "s", summary=summary)  # run 7: seqs 25, 26
    # 4 whole tool results: runs 3-6 stay whole, so only runs 1-2 may go, a run at a time
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=4, limit=5) == 4, "run 1"
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=4, limit=5) == 4, "run 2"
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=4, limit=100) == 0
    # 1 whole result: what the summary covers and the 2 newest runs bound it: runs 3-4 go
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=1, limit=100) == 8
    assert await store.prune_history("t", keep_runs=2, keep_tool_calls=1, limit=100) == 0
    history = await all_messages(store, "t")
    assert [m.seq for m in history] == list(range(17, 27))
    paired(history)
    await store.admit([user("t", "after")])
    c, load = await take(store, "t")
    assert load.summary is not None and load.summary.upto_seq == 16
    assert [m.seq for m in load.view] == list(range(17, 27)), "the view reads what is left"
    await store.release(c)


async def test_a_thread_with_children_keeps_its_history(store: Store) -> None:
    await tool_turns(store, "p", 3, 10)
    summary = Summary(thread_id="p", upto_seq=8, content="s", tokens=1, covered_tokens=0, made_at_seq=12)
    child = NewThread(id="p/c", agent="a", parent_id="p", parent_seq=12)
    await turn(store, "p", "s", summary=summary, threads=[child])
    assert await store.prune_history("p", keep_runs=1, keep_tool_calls=1, limit=100) == 0
    assert len(await all_messages(store, "p")) == 14


def sets(**values: object) -> tuple[StateChange, ...]:
    return tuple(
        StateChange(op="delete", key=k)
        if v is None
        else StateChange(op="update", key=k, value=journal_json(v))
        for k, v in values.items()
    )


def journal_json(value: object) -> str:
    return msgspec.json.encode(value).decode()


async def run(store: Store, thread: str, n: int) -> None:
    """Run ``n``: ``k`` set twice (the first superseded), ``r<n>`` set once."""
    await store.admit([user(thread, f"run{n}")])
    c, load = await take(store, thread)
    changes = sets(k=n * 10) + sets(k=n) + sets(**{f"r{n}": n})
    await store.commit_slice(msgspec.structs.replace(plan(c, load), state=changes, runs=1))


async def test_the_journal_keeps_recent_runs_whole_and_folds_old_ones(store: Store) -> None:
    ends: dict[int, int] = {}
    for n in range(1, 9):
        await run(store, "j", n)
        ends[n] = (await store.journal.recover("j")).upto
        if n == 3:
            full = await store.journal.checkpoint("j", "full")
            assert full is not None and full.upto == ends[3]
    whole = {n: await store.journal.state_at("j", ends[n]) for n in ends}
    mid_run_7 = await store.journal.state_at("j", ends[7] - 1)  # run 7 before its r7
    state = (await store.journal.recover("j")).state
    # runs 7-8 whole; 4-6 keep their last change per key; 1-3 folded into the checkpoint
    deleted = await store.journal.apply_tiers("j", full_runs=2, metric_runs=3, limit=100)
    assert deleted == 6 + 6, "one superseded change in each of runs 1-6, then runs 1-3's six records"
    assert await store.journal.apply_tiers("j", full_runs=2, metric_runs=3, limit=100) == 0
    assert (await store.journal.recover("j")).state == state, "recovery is unchanged"
    for n in range(3, 9):
        assert await store.journal.state_at("j", ends[n]) == whole[n], f"exact at the end of run {n}"
    assert await store.journal.state_at("j", ends[7] - 1) == mid_run_7, "exact inside the newest runs"
    with pytest.raises(UsageError, match="folded"):
        await store.journal.state_at("j", ends[2])
    entries = (await store.journal.entries("j", limit=100)).items
    assert all(e.run > 3 or e.kind == "full" for e in entries)


async def test_fork_branches_a_thread_without_changing_it(store: Store) -> None:
    await tool_turns(store, "src", 2, 10)
    fork = await store.fork_thread("src", "src~1", 4, {"k": '"v"'})
    assert (fork.parent_id, fork.parent_seq, fork.agent, fork.last_seq) == ("src", 4, "a", 0)
    assert (await store.journal.recover("src~1")).state == {"k": '"v"'}
    assert len(await all_messages(store, "src")) == 8, "the source is not changed"
    await store.admit([user("src~1", "go")])
    c, load = await take(store, "src~1")
    assert [m.seq for m in load.view] == [1, 2, 3, 4], "its view reads the source's history to seq 4"
    await store.release(c)
    with pytest.raises(UsageError):
        await store.fork_thread("src", "src~1", 4, {})
    with pytest.raises(UsageError):
        await store.fork_thread("src", "src~2", 99, {})
    with pytest.raises(NotFound):
        await store.fork_thread("nope", "src~3", 0, {})


async def test_tier_sizes_count_each_tier(store: Store) -> None:
    await tool_turns(store, "t", 3, 1000)
    before = await store.retention_sizes()
    assert before.tool_full >= 3 * 1000 and before.tool_excerpt == 0 and before.history > 0
    assert before.dedup_keys > 0
    await store.shrink_tool_results("t", keep=1, head_chars=10, limit=10)
    after = await store.retention_sizes()
    assert after.tool_excerpt == 2 * (10 + len(NOTE.encode()))
    assert after.tool_full == before.tool_full - 2 * 1004
    assert dict(after.items()).keys() == {
        "tool_full",
        "tool_excerpt",
        "history",
        "journal",
        "blobs",
        "dedup_keys",
    }
