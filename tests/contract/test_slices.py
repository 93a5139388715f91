"""Contract: claiming threads, loading slices, committing plans, releasing and renewing leases."""

from __future__ import annotations

import msgspec
import pytest

from dormant.errors import DormantError, LeaseLost, NotFound, StoreError
from dormant.inbox import AGING
from dormant.records import CommitPlan, Message, NewThread, Priority, ToolCall, ViewLimits
from dormant.store.base import Store
from dormant.store.core import USER_KEY_PREFIX, StoreCore
from dormant.store.sqlite import SQLiteStore
from dormant.store.sqlite import reader as sqlite_reader
from dormant.view import builder as context
from dormant.view.builder import message_bytes, message_tokens
from tests.contract.support import (
    LEASE,
    call,
    claim,
    pending_inputs,
    plan,
    ready_ids,
    result,
    take,
    turn,
    user,
)
from tests.helpers import FakeClock, all_messages


async def snapshot(store: Store, *thread_ids: str) -> tuple[object, ...]:
    """Everything observable about some threads, to prove that nothing changed."""
    out: list[object] = []
    for thread_id in thread_ids:
        try:
            thread = await store.get_thread(thread_id)
        except NotFound:
            out.append(None)
            continue
        out.append((thread.last_seq, thread.awaiting, thread.status, thread.failures))
        out.append(tuple(await all_messages(store, thread_id)))
    out.append(tuple((e.call_id, e.status) for e in (await store.list_outbox(limit=1000)).items))
    status = await store.status()
    out.append((status.backlog_by_priority, status.messages, status.threads_by_status))
    return tuple(out)


# -- claim_threads ----------------------------------------------------------------------


async def test_only_threads_with_ready_input_are_claimed(store: Store) -> None:
    await store.create_thread("idle", "a")
    await store.admit([user("busy", "k1")])
    assert await ready_ids(store) == ["busy"]


async def test_not_before_is_respected(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1", not_before=clock.now + 60)])
    assert await store.claim_threads("w", 10, LEASE) == []
    assert not await store.has_work()
    clock.advance(59)
    assert await store.claim_threads("w", 10, LEASE) == []
    clock.advance(1)
    assert await ready_ids(store) == ["t1"]


async def test_a_due_input_is_loaded_before_an_earlier_future_one(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "later", not_before=clock.now + 60), user("t1", "now")])
    assert await pending_inputs(store, "t1") == ["now"]
    clock.advance(60)
    assert await pending_inputs(store, "t1") == ["later", "now"]


async def test_a_lease_excludes_other_workers(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    mine = await claim(store, "t1", worker="w1")
    assert mine.expires_at == clock.now + LEASE
    await store.admit([user("t1", "k2")])
    assert await store.claim_threads("w2", 10, LEASE) == []
    clock.advance(LEASE - 1)
    assert await store.claim_threads("w2", 10, LEASE) == []
    assert await store.has_work(), "a leased thread is work in flight"


async def test_an_expired_lease_is_claimable_again(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    old = await claim(store, "t1", worker="w1")
    clock.advance(LEASE + 1)
    new = await claim(store, "t1", worker="w2")
    assert new.token != old.token
    assert await store.renew_leases([old], LEASE) == []


async def claim_order(store: Store, n: int) -> list[str]:
    """Thread ids in the order successive one-thread claims return them."""
    out = []
    for _ in range(n):
        (c,) = await store.claim_threads("w", 1, LEASE)
        out.append(c.thread_id)
    return out


async def test_priority_classes_claim_p0_first(store: Store) -> None:
    await store.admit([user("bulk", "k", priority=Priority.P2)])
    await store.admit([user("normal", "k", priority=Priority.P1)])
    await store.admit([user("urgent", "k", priority=Priority.P0)])
    assert await claim_order(store, 3) == ["urgent", "normal", "bulk"]


async def test_a_batch_claim_takes_the_best_threads(store: Store) -> None:
    await store.admit([user("bulk", "k", priority=Priority.P2)])
    await store.admit([user("normal", "k", priority=Priority.P1)])
    await store.admit([user("urgent", "k", priority=Priority.P0)])
    claims = await store.claim_threads("w", 2, LEASE)
    assert {c.thread_id for c in claims} == {"urgent", "normal"}


async def test_a_threads_best_input_decides_its_place(store: Store) -> None:
    await store.admit([user("a", "k", priority=Priority.P1)])
    await store.admit([user("b", "k1", priority=Priority.P2), user("b", "k2", priority=Priority.P0)])
    assert [c.thread_id for c in await store.claim_threads("w", 1, LEASE)] == ["b"]


async def test_aging_lets_old_bulk_work_run_before_newer_normal_work(store: Store, clock: FakeClock) -> None:
    await store.admit([user("bulk", "k", priority=Priority.P2)])
    clock.advance(AGING[Priority.P2] - AGING[Priority.P1] + 1)
    await store.admit([user("normal", "k", priority=Priority.P1)])
    assert await claim_order(store, 2) == ["bulk", "normal"]


async def test_the_limit_is_respected(store: Store) -> None:
    await store.admit([user(f"t{i}", "k") for i in range(5)])
    assert len(await store.claim_threads("w", 2, LEASE)) == 2
    assert len(await store.claim_threads("w", 0, LEASE)) == 0
    assert len(await store.claim_threads("w", 10, LEASE)) == 3
    assert await store.claim_threads("w", 10, LEASE) == []


async def test_fifo_among_equal_threads(store: Store, clock: FakeClock) -> None:
    for i in range(5):
        await store.admit([user(f"t{i}", "k")])
        clock.advance(0.001)
    assert await claim_order(store, 5) == [f"t{i}" for i in range(5)]


async def test_an_awaiting_thread_is_claimable_only_for_tool_results(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    assert (await store.get_thread("t1")).awaiting == 1
    await store.admit([user("t1", "k2"), user("t1", "k3", kind="event")])
    assert await ready_ids(store) == []
    assert await store.has_work(), "the open call is work"
    await store.admit([result("t1", "c1")])
    c, load = await take(store, "t1")
    assert [i.dedup_key for i in load.inputs] == ["c1"], "user input waits behind the open call"
    await store.commit_slice(plan(c, load))
    assert (await store.get_thread("t1")).awaiting == 0
    assert await pending_inputs(store, "t1") == ["k2", "k3"]


# -- load_slice -------------------------------------------------------------------------


async def test_inputs_load_in_admission_order(store: Store, clock: FakeClock) -> None:
    for i in range(6):
        await store.admit([user("t1", f"k{i}", priority=Priority(i % 3))])
        clock.advance(1)
    _, load = await take(store, "t1")
    assert [i.dedup_key for i in load.inputs] == [f"k{i}" for i in range(6)]
    assert [i.id for i in load.inputs] == sorted(i.id for i in load.inputs)
    assert load.thread.id == "t1"


async def test_each_slice_of_a_claim_batch_loads_its_own_thread(store: Store) -> None:
    for tid in ("b1", "b2", "b3"):
        await turn(store, tid, "k1")
        await store.admit([user(tid, "k2", f"{tid} two"), user(tid, "k3", f"{tid} three")])
    claims = {c.thread_id: c for c in await store.claim_threads("w", 10, LEASE)}
    assert sorted(claims) == ["b1", "b2", "b3"]
    for tid in ("b2", "b3", "b1"):  # not in claim order
        load = await store.load_slice(claims[tid], ViewLimits(max_inputs=1))
        assert load.thread.id == tid and load.thread.last_seq == 2
        assert [i.content for i in load.inputs] == [f"{tid} two"]
        assert [m.seq for m in load.view] == [1, 2]
        await store.commit_slice(plan(claims[tid], load))
    assert sorted(await ready_ids(store)) == ["b1", "b2", "b3"]


async def test_a_batch_load_parks_a_bounded_number_of_bytes(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite parks the rows of a claim batch; past its byte cap the rest load one by one
    monkeypatch.setattr(sqlite_reader, "PARKED_BYTES", 2 * (sqlite_reader.ROW_OVERHEAD + 600))
    tids = [f"p{n}" for n in range(5)]
    for tid in tids:
        await store.admit([user(tid, "k1", tid + " " + "x" * 600)])
    claims = {c.thread_id: c for c in await store.claim_threads("w", 10, LEASE)}
    for tid in reversed(tids):
        load = await store.load_slice(claims[tid], ViewLimits())
        assert load.thread.id == tid and [i.content[:3] for i in load.inputs] == [tid + " "]
        if isinstance(store, SQLiteStore):
            assert len(store.backend._batches._loaded) <= 2
        await store.commit_slice(plan(claims[tid], load))
    assert await ready_ids(store) == []


async def test_an_input_admitted_after_the_claim_is_never_lost(store: Store) -> None:
    await store.admit([user("a1", "k1"), user("a2", "k1")])
    claims = {c.thread_id: c for c in await store.claim_threads("w", 10, LEASE)}
    load1 = await store.load_slice(claims["a1"], ViewLimits())
    await store.admit([user("a2", "late", "late one")])
    load2 = await store.load_slice(claims["a2"], ViewLimits())
    await store.commit_slice(plan(claims["a1"], load1))
    await store.commit_slice(plan(claims["a2"], load2))
    got = [i.dedup_key for i in load2.inputs]
    assert got[0] == "k1" and got in (["k1"], ["k1", "late"])
    if got == ["k1"]:  # loaded before it arrived: the thread is ready again for it
        assert await ready_ids(store) == ["a2"]
        _, load = await take(store, "a2")
        assert [i.dedup_key for i in load.inputs] == ["late"]
    else:
        assert await ready_ids(store) == []


async def test_the_view_is_bounded_and_newest(store: Store) -> None:
    await turn(store, "t1", "k1", extra=9)  # user + 10 assistant messages
    await store.admit([user("t1", "k2")])
    c, load = await take(store, "t1", ViewLimits(max_messages=4))
    assert [m.seq for m in load.view] == [8, 9, 10, 11]
    assert load.thread.last_seq == 11
    load = await store.load_slice(c, ViewLimits(max_messages=100, max_bytes=120))
    assert 1 <= len(load.view) < 11 and load.view[-1].seq == 11
    assert sum(message_bytes(m) for m in load.view) <= 120
    seqs = [m.seq for m in load.view]
    assert seqs == list(range(seqs[0], 12)), "a contiguous suffix"


async def test_the_view_is_bounded_by_tokens(store: Store) -> None:
    await turn(store, "t1", "k1", extra=9)
    await store.admit([user("t1", "k2")])
    c, full = await take(store, "t1")
    assert len(full.view) == 11
    budget = sum(message_tokens(m) for m in full.view[-3:])
    load = await store.load_slice(c, ViewLimits(max_tokens=budget))
    assert [m.seq for m in load.view] == [9, 10, 11]


async def test_a_huge_message_is_shown_as_head_and_tail(store: Store) -> None:
    text = "HEAD " + "x" * 50_000 + " TAIL"
    await store.admit([user("t1", "k1", text)])
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load))
    await store.admit([user("t1", "k2")])
    limits = ViewLimits(max_bytes=16_384)
    _, load = await take(store, "t1", limits)
    (shown, _reply) = load.view
    assert shown.content.startswith("HEAD ") and shown.content.endswith(" TAIL")
    assert "characters cut from the middle" in shown.content
    assert message_bytes(shown) <= limits.max_bytes // 4
    stored = (await store.history("t1")).items[0]
    assert stored.content == text, "the stored message is unchanged"


async def test_the_view_never_starts_with_a_tool_result(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1"), call("c2")])
    await store.admit([result("t1", "c1"), result("t1", "c2")])
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load, reply="both in"))
    await store.admit([user("t1", "k2")])
    _, load = await take(store, "t1", ViewLimits(max_messages=2))
    assert [m.role for m in load.view] == ["assistant"], "the orphaned tool result is left out"
    assert load.view[0].content == "both in"


async def test_a_child_sees_its_parent_up_to_the_spawn_point(store: Store) -> None:
    await store.admit([user("p", "k1", "parent asks")])
    c, load = await take(store, "p")
    child = NewThread(id="p/c", agent="a", parent_id="p", parent_seq=1)
    await store.commit_slice(
        plan(
            c,
            load,
            reply="spawning",
            threads=[child],
            admissions=[user("p/c", "task", "child task", agent=None)],
        )
    )
    await turn(store, "p", "k2")  # the parent moves on; the child must not see this
    cc, cload = await take(store, "p/c")
    assert [m.content for m in cload.view] == ["parent asks"]
    await store.commit_slice(plan(cc, cload, reply="child answer"))
    await store.admit([user("p/c", "more")])
    _, cload = await take(store, "p/c")
    assert [m.content for m in cload.view] == ["parent asks", "child task", "child answer"]
    thread = await store.get_thread("p/c")
    assert (thread.parent_id, thread.parent_seq, thread.agent) == ("p", 1, "a")


# -- commit_slice -----------------------------------------------------------------------


async def test_commit_appends_messages_consumes_inputs_and_releases_the_lease(
    store: Store, clock: FakeClock
) -> None:
    await store.admit([user("t1", "k1", "hi"), user("t1", "k2", "there")])
    c, load = await take(store, "t1")
    committed = plan(c, load, reply="hello")
    await store.commit_slice(committed)
    history = await all_messages(store, "t1")
    assert [(m.seq, m.role, m.content) for m in history] == [
        (1, "user", "hi"),
        (2, "user", "there"),
        (3, "assistant", "hello"),
    ]
    assert [m.input_id for m in history] == [load.inputs[0].id, load.inputs[1].id, None]
    assert all(m.created_at == clock.now for m in history), "created_at defaults to the commit time"
    thread = await store.get_thread("t1")
    assert (thread.last_seq, thread.awaiting) == (3, 0)
    assert not await store.has_work()
    assert await store.renew_leases([c], LEASE) == [], "the lease is released"
    await store.admit([user("t1", "k3")])
    assert await pending_inputs(store, "t1") == ["k3"]


async def test_commit_keeps_every_message_field(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    base = plan(c, load, reply=None)
    extra = (
        Message(
            seq=2,
            role="assistant",
            content="",
            tool_calls=(ToolCall(id="x1", name="f", arguments='{"a": 1}'),),
            created_at=123.0,
        ),
        Message(seq=3, role="tool", content="res", tool_call_id="x1", name="f", source="inline"),
    )
    await store.commit_slice(
        CommitPlan(thread_id="t1", token=c.token, consumed=base.consumed, messages=base.messages + extra)
    )
    history = await all_messages(store, "t1")
    assert history[1] == extra[0]
    got = history[2]
    assert (got.role, got.content, got.tool_call_id, got.name, got.source) == (
        "tool",
        "res",
        "x1",
        "f",
        "inline",
    )


async def test_commit_writes_outbox_entries(store: Store, clock: FakeClock) -> None:
    await turn(
        store,
        "t1",
        "k1",
        calls=[call("c1", "fetch", idempotent=True, arguments='{"u": 1}'), call("c2", "pay")],
    )
    entries = (await store.list_outbox()).items
    assert [(e.call_id, e.tool, e.arguments, e.idempotent, e.status, e.attempts) for e in entries] == [
        ("c1", "fetch", '{"u": 1}', True, "pending", 0),
        ("c2", "pay", "{}", False, "pending", 0),
    ]
    assert all(e.thread_id == "t1" and e.agent == "a" and e.created_at == clock.now for e in entries)
    assert (await store.get_thread("t1")).awaiting == 2
    assert await store.has_work()


async def test_commit_creates_child_threads_and_admits_inputs_anywhere(store: Store) -> None:
    await store.admit([user("other", "k0")])
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    child = NewThread(id="t1/kid", agent="b", parent_id="t1", parent_seq=1)
    committed = plan(
        c,
        load,
        threads=[child],
        admissions=[
            user("t1/kid", "task", agent=None),
            user("other", "note", agent=None),
            user("t1", "self", agent=None, kind="timer"),
            user("fresh", "hello", agent="z"),
        ],
    )
    await store.commit_slice(committed)
    kid = await store.get_thread("t1/kid")
    assert (kid.agent, kid.parent_id, kid.parent_seq, kid.last_seq) == ("b", "t1", 1, 0)
    assert await pending_inputs(store, "t1/kid") == ["task"]
    assert await pending_inputs(store, "other") == ["k0", "note"]
    assert await pending_inputs(store, "t1") == ["self"]
    assert (await store.get_thread("fresh")).agent == "z"


async def test_commit_with_a_wrong_token_is_lease_lost_and_changes_nothing(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    good = plan(
        c, load, calls=[call("c1")], threads=[NewThread(id="kid", agent="a", parent_id="t1", parent_seq=0)]
    )
    bad = CommitPlan(
        thread_id=good.thread_id,
        token="forged",
        consumed=good.consumed,
        messages=good.messages,
        calls=good.calls,
        threads=good.threads,
        admissions=(user("t2", "x"),),
        awaiting=good.awaiting,
    )
    before = await snapshot(store, "t1", "kid", "t2")
    with pytest.raises(LeaseLost):
        await store.commit_slice(bad)
    assert await snapshot(store, "t1", "kid", "t2") == before
    await store.commit_slice(good)  # the real holder still can
    assert (await store.get_thread("t1")).last_seq == 2


async def test_a_stale_commit_after_a_takeover_is_lease_lost(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    old, old_load = await take(store, "t1", worker="w1")
    clock.advance(LEASE + 1)
    new, new_load = await take(store, "t1", worker="w2")
    await store.commit_slice(plan(new, new_load, reply="from w2"))
    before = await snapshot(store, "t1")
    with pytest.raises(LeaseLost):
        await store.commit_slice(plan(old, old_load, reply="from w1"))
    assert await snapshot(store, "t1") == before
    assert [m.content for m in await all_messages(store, "t1")] == ["text of k1", "from w2"]


async def test_a_stale_commit_before_the_new_holder_commits_is_lease_lost(
    store: Store, clock: FakeClock
) -> None:
    await store.admit([user("t1", "k1")])
    old, old_load = await take(store, "t1", worker="w1")
    clock.advance(LEASE + 1)
    new, new_load = await take(store, "t1", worker="w2")
    with pytest.raises(LeaseLost):
        await store.commit_slice(plan(old, old_load, reply="from w1"))
    await store.commit_slice(plan(new, new_load, reply="from w2"))
    assert [m.content for m in await all_messages(store, "t1")] == ["text of k1", "from w2"]


async def test_consuming_an_already_consumed_input_fails_and_changes_nothing(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load))
    old_id = load.inputs[0].id
    await store.admit([user("t1", "k2")])
    c2, load2 = await take(store, "t1")
    bad = plan(c2, load2, consumed=[old_id, load2.inputs[0].id])
    before = await snapshot(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(bad)
    assert await snapshot(store, "t1") == before
    await store.commit_slice(plan(c2, load2))  # the lease survived the refused commit
    assert [m.content for m in await all_messages(store, "t1")] == ["text of k1", "ok", "text of k2", "ok"]


async def test_consuming_one_input_twice_in_a_plan_fails(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    before = await snapshot(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, consumed=[load.inputs[0].id, load.inputs[0].id]))
    assert await snapshot(store, "t1") == before


async def test_consuming_another_threads_input_fails(store: Store) -> None:
    (other,) = await store.admit([user("t2", "k")])
    await store.release(await claim(store, "t2"))
    await store.admit([user("t1", "k1")])
    claims = {x.thread_id: x for x in await store.claim_threads("w", 10, LEASE)}
    load = await store.load_slice(claims["t1"], ViewLimits())
    with pytest.raises(StoreError):
        await store.commit_slice(plan(claims["t1"], load, consumed=[load.inputs[0].id, other.input_id]))
    assert (await store.get_thread("t1")).last_seq == 0


@pytest.mark.parametrize("shift", [-1, 1])
async def test_messages_must_continue_the_threads_sequence(store: Store, shift: int) -> None:
    await turn(store, "t1", "k1")
    await store.admit([user("t1", "k2")])
    c, load = await take(store, "t1")
    good = plan(c, load)
    shifted = tuple(
        Message(seq=m.seq + shift, role=m.role, content=m.content, input_id=m.input_id) for m in good.messages
    )
    before = await snapshot(store, "t1")
    with pytest.raises(DormantError):
        await store.commit_slice(
            CommitPlan(thread_id="t1", token=c.token, consumed=good.consumed, messages=shifted)
        )
    assert await snapshot(store, "t1") == before


async def test_creating_an_existing_thread_fails_and_changes_nothing(store: Store) -> None:
    await store.create_thread("taken", "a")
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    before = await snapshot(store, "t1", "taken")
    with pytest.raises(StoreError):
        await store.commit_slice(
            plan(c, load, threads=[NewThread(id="taken", agent="a", parent_id="t1", parent_seq=0)])
        )
    assert await snapshot(store, "t1", "taken") == before


async def test_an_admission_to_an_unknown_thread_fails_the_commit(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    before = await snapshot(store, "t1", "ghost")
    with pytest.raises(NotFound):
        await store.commit_slice(plan(c, load, admissions=[user("ghost", "x", agent=None)]))
    assert await snapshot(store, "t1", "ghost") == before


async def test_a_duplicate_call_id_in_the_outbox_fails_the_commit(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    await store.admit([result("t1", "c1")])
    c, load = await take(store, "t1")
    before = await snapshot(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, calls=[call("c1")]))
    assert await snapshot(store, "t1") == before


async def test_two_calls_with_one_id_in_a_plan_fail_the_commit(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    before = await snapshot(store, "t1")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, calls=[call("c1"), call("c1")]))
    assert await snapshot(store, "t1") == before


async def test_two_children_with_one_id_in_a_plan_fail_the_commit(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    kid = NewThread(id="kid", agent="a", parent_id="t1", parent_seq=0)
    before = await snapshot(store, "t1", "kid")
    with pytest.raises(StoreError):
        await store.commit_slice(plan(c, load, threads=[kid, kid]))
    assert await snapshot(store, "t1", "kid") == before


async def test_an_empty_plan_just_releases_the_lease(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.commit_slice(CommitPlan(thread_id="t1", token=c.token, consumed=(), messages=()))
    assert (await store.get_thread("t1")).last_seq == 0
    assert await pending_inputs(store, "t1") == ["k1"]


# -- release, retry, renew --------------------------------------------------------------


async def test_release_with_backoff(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.release(c, retry_at=clock.now + 10, error="model down")
    thread = await store.get_thread("t1")
    assert (thread.failures, thread.error, thread.status) == (1, "model down", "active")
    clock.advance(9)
    assert await store.claim_threads("w", 10, LEASE) == []
    clock.advance(1)
    c2 = await claim(store, "t1")
    await store.release(c2, retry_at=clock.now + 1, error="again")
    assert (await store.get_thread("t1")).failures == 2
    clock.advance(1)
    c3, load = await take(store, "t1")
    await store.commit_slice(plan(c3, load))
    thread = await store.get_thread("t1")
    assert (thread.failures, thread.error) == (0, None), "a successful slice clears the failure count"


async def test_release_without_error_keeps_the_failure_count(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.release(c)
    assert (await store.get_thread("t1")).failures == 0
    assert await ready_ids(store) == ["t1"]


async def test_attempts_are_counted_at_claim_so_a_lapsed_lease_counts(store: Store, clock: FakeClock) -> None:
    """A slice that kills its worker never releases; its claim still counted."""
    await store.admit([user("t1", "k1")])
    counts = []
    for _ in range(3):
        c = await claim(store, "t1")
        counts.append((c.attempts, (await store.get_thread("t1")).failures))
        clock.advance(LEASE + 1)  # the worker died: no release, no commit
    assert counts == [(1, 1), (2, 2), (3, 3)]
    c, load = await take(store, "t1")
    assert c.attempts == 4
    await store.commit_slice(plan(c, load))
    assert (await store.get_thread("t1")).failures == 0, "a commit resets the count"
    await store.admit([user("t1", "k2")])
    c = await claim(store, "t1")
    assert c.attempts == 1


async def test_fail_marks_the_thread_failed_until_retried(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.release(c, retry_at=clock.now + 1, error="bad request", fail=True)
    thread = await store.get_thread("t1")
    assert (thread.status, thread.error, thread.failures) == ("failed", "bad request", 1)
    clock.advance(3600)
    assert await store.claim_threads("w", 10, LEASE) == []
    assert not await store.has_work()
    assert (await store.status()).threads_by_status == {"failed": 1}
    again = await store.retry_thread("t1")
    assert (again.status, again.failures, again.error) == ("active", 0, None)
    assert await pending_inputs(store, "t1") == ["k1"]


async def test_retry_makes_a_backed_off_thread_claimable_now(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.release(c, retry_at=clock.now + 3600, error="x")
    await store.retry_thread("t1")
    assert await ready_ids(store) == ["t1"]


async def test_retry_of_an_unknown_thread_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.retry_thread("ghost")


async def test_release_with_a_stale_token_changes_nothing(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    old = await claim(store, "t1", worker="w1")
    clock.advance(LEASE + 1)
    new = await claim(store, "t1", worker="w2")
    await store.release(old, error="late", fail=True)
    thread = await store.get_thread("t1")
    # two claims without a commit: the lapsed one counts (its worker may have died)
    assert (thread.status, thread.failures, thread.error) == ("active", 2, None)
    assert new.attempts == 2
    assert await store.renew_leases([new], LEASE) != []


async def test_renew_extends_held_leases_only(store: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k"), user("t2", "k")])
    claims = {c.thread_id: c for c in await store.claim_threads("w1", 10, LEASE)}
    clock.advance(LEASE + 1)
    stolen = await store.claim_threads("w2", 1, LEASE)  # one expired lease is taken over
    lost = stolen[0].thread_id
    kept_id = "t2" if lost == "t1" else "t1"
    kept = await store.renew_leases(list(claims.values()), 100.0)
    assert [k.thread_id for k in kept] == [kept_id]
    assert kept[0].token == claims[kept_id].token and kept[0].expires_at == clock.now + 100.0
    clock.advance(90)
    assert kept_id not in [c.thread_id for c in await store.claim_threads("w3", 10, 10.0)]
    assert await store.renew_leases([], LEASE) == []


async def test_retrying_a_thread_while_its_slice_runs_keeps_the_lease(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    retried = await store.retry_thread("t1")
    assert retried.status == "active"
    assert await store.claim_threads("w2", 10, LEASE) == []  # no second slice of t1
    await store.commit_slice(plan(c, load))  # the lease still holds
    assert await ready_ids(store) == []


async def test_a_slice_reads_no_input_past_its_byte_cut(store: Store) -> None:
    big = "x" * 400_000
    await store.admit([user("t1", f"k{n}", big) for n in range(5)])
    c = await claim(store, "t1")
    assert isinstance(store, StoreCore)
    async with store.backend.reader() as reader:  # what the backend fetched, before the core's cut
        loaded = await reader.slice_rows(c, 32, 1_000_000)
    assert loaded is not None  # (keys as stored: in the user namespace)
    assert [i.dedup_key.removeprefix(USER_KEY_PREFIX) for i in loaded[1]] == ["k0", "k1"]
    async with store.backend.reader() as reader:  # the first input is read whatever its size
        loaded = await reader.slice_rows(c, 32, 10)
    assert loaded is not None and [i.dedup_key.removeprefix(USER_KEY_PREFIX) for i in loaded[1]] == ["k0"]
    load = await store.load_slice(c, ViewLimits(max_input_bytes=1_000_000))
    assert [i.dedup_key for i in load.inputs] == ["k0", "k1"]


async def test_counts_made_on_read_are_written_back_so_a_rebuild_counts_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    # eleven messages stored uncounted, under a token budget their byte bounds cannot prove
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    stored = plan(c, load, extra=9)
    uncounted = tuple(msgspec.structs.replace(m, tokens=0) for m in stored.messages)
    await store.commit_slice(msgspec.structs.replace(stored, messages=uncounted))
    assert all(m.tokens == 0 for m in await all_messages(store, "t1"))
    budget = sum(message_tokens(m) for m in uncounted[-4:])
    limits = ViewLimits(max_tokens=budget, max_bytes=1 << 20)
    await store.admit([user("t1", "k2")])
    c, first = await take(store, "t1", limits)
    assert [m.seq for m in first.view] == [8, 9, 10, 11]
    # the next commit (here one that only releases the lease) writes the counts back
    await store.commit_slice(CommitPlan(thread_id="t1", token=c.token, consumed=(), messages=()))
    rows = {m.seq: m.tokens for m in await all_messages(store, "t1")}
    # the view's four and the one that did not fit (counted to decide) are stored
    assert all(rows[seq] == message_tokens(uncounted[seq - 1]) for seq in range(7, 12)), rows
    assert rows[1] == 0, "a message the view never counted stays uncounted"
    # a rebuild (cache dropped) now reads the stored counts and counts nothing
    assert isinstance(store, StoreCore)
    store.views.discard("t1")

    def no_counting(*args: object, **kwargs: object) -> int:
        raise AssertionError("counted again")

    monkeypatch.setattr(context, "count_message", no_counting)
    _, again = await take(store, "t1", limits)
    assert again.view == first.view
