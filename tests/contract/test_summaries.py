"""Compaction summaries: stored with the plan, the start of later views, inherited as they were."""

from __future__ import annotations

import msgspec
import pytest

from dormant.errors import NotFound, StoreError
from dormant.records import NewThread, SliceLoad, Summary, ViewLimits
from dormant.store.base import Store

from .support import COUNTER, plan, take, turn, user


def summary_of(load: SliceLoad, upto: int, text: str = "the story so far") -> Summary:
    after = sum(m.tokens for m in load.view if m.seq > upto)
    return Summary(
        thread_id=load.thread.id,
        upto_seq=upto,
        content=text,
        tokens=COUNTER.text(text) + 4,
        covered_tokens=load.thread.tokens - after,
        made_at_seq=load.thread.last_seq,
    )


async def test_token_counts_are_stored_with_messages_and_summed_on_the_thread(store: Store) -> None:
    committed = await turn(store, "t1", "k1", extra=2)
    assert all(m.tokens > 0 for m in committed.messages)
    stored = (await store.history("t1")).items
    assert [m.tokens for m in stored] == [m.tokens for m in committed.messages]
    thread = await store.get_thread("t1")
    assert thread.tokens == sum(m.tokens for m in committed.messages)
    assert thread.tokens_since_summary == thread.tokens and thread.summary_seq == 0


async def test_a_summary_starts_later_views_and_the_originals_stay(store: Store) -> None:
    await turn(store, "t1", "k1", extra=4)  # user, reply and 4 more: seqs 1..6
    await store.admit([user("t1", "k2")])
    c, load = await take(store, "t1")
    new = summary_of(load, 4)
    await store.commit_slice(plan(c, load, summary=new))  # seqs 7, 8
    thread = await store.get_thread("t1")
    assert thread.summary_seq == 4
    assert thread.summarized_tokens == new.covered_tokens
    assert thread.tokens_since_summary == sum(m.tokens for m in (await store.history("t1")).items[4:])
    await store.admit([user("t1", "k3")])
    _, load = await take(store, "t1")
    assert load.summary is not None and load.summary.content == "the story so far"
    assert load.summary.upto_seq == 4 and load.summary.made_at_seq == 6
    assert [m.seq for m in load.view] == [5, 6, 7, 8]
    assert len((await store.history("t1")).items) == 8, "the originals stay in the store"
    latest = await store.latest_summary("t1")
    assert latest is not None and (latest.upto_seq, latest.made_at_seq) == (4, 6)
    with pytest.raises(NotFound):  # a tenant never reads a summary outside it
        await store.latest_summary("t1", tenant="t0123456789ab")
    await turn(store, "t2", "k1")
    assert await store.latest_summary("t2") is None


async def test_a_summary_must_move_forward_over_stored_messages(store: Store) -> None:
    await turn(store, "t1", "k1", extra=2)  # seqs 1..4
    await store.admit([user("t1", "k2")])
    c, load = await take(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, summary=summary_of(load, 5)))  # not stored yet
    await store.commit_slice(plan(c, load, summary=summary_of(load, 2)))
    await store.admit([user("t1", "k3")])
    c, load = await take(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, summary=summary_of(load, 2)))  # not forward
    assert (await store.get_thread("t1")).summary_seq == 2


async def test_a_child_sees_only_the_summaries_its_parent_had_when_it_was_spawned(store: Store) -> None:
    await turn(store, "p", "k1", extra=3)  # seqs 1..5
    await store.admit([user("p", "k2")])
    c, load = await take(store, "p")
    early = summary_of(load, 2, "early summary")
    child = NewThread(id="p/c", agent="a", parent_id="p", parent_seq=6)
    await store.commit_slice(
        plan(c, load, summary=early, threads=[child], admissions=[user("p/c", "task", agent=None)])
    )  # seqs 6, 7; the child is spawned at 6, after the early summary (made at 5)
    await store.admit([user("p", "k3")])
    c, load = await take(store, "p")
    late = summary_of(load, 5, "late summary")
    await store.commit_slice(plan(c, load, summary=late))
    await store.admit([user("p", "k4")])
    _, parent_view = await take(store, "p")
    assert parent_view.summary is not None and parent_view.summary.content == "late summary"

    _, load = await take(store, "p/c")
    assert load.summary is not None and load.summary.content == "early summary"
    assert [m.seq for m in load.view] == [3, 4, 5, 6]
    assert load.inherited == 4


async def test_a_child_spawned_before_any_summary_sees_its_whole_inheritance(store: Store) -> None:
    await turn(store, "p", "k1", extra=2)  # seqs 1..4
    await store.admit([user("p", "k2")])
    c, load = await take(store, "p")
    child = NewThread(id="p/c", agent="a", parent_id="p", parent_seq=3)
    await store.commit_slice(plan(c, load, threads=[child], admissions=[user("p/c", "task", agent=None)]))
    await store.admit([user("p", "k3")])
    c, load = await take(store, "p")
    await store.commit_slice(plan(c, load, summary=summary_of(load, 4)))
    _, load = await take(store, "p/c", ViewLimits())
    assert load.summary is None
    assert [m.seq for m in load.view] == [1, 2, 3] and load.inherited == 3
    assert msgspec.structs.asdict(load.thread)["parent_seq"] == 3
