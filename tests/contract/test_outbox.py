"""Contract: the outbox (claim, finish, retry, dead letters, reconciliation after a crash)."""

from __future__ import annotations

import pytest

from dormant.errors import DormantError, InvalidInput, NotFound
from dormant.inbox import UNKNOWN_OUTCOME
from dormant.records import OutboxEntry, OutboxOutcome, ViewLimits
from dormant.store.base import Store
from dormant.store.core import USER_KEY_PREFIX
from tests.contract.support import LEASE, call, pending_inputs, plan, result, take, turn, user
from tests.helpers import FakeClock, all_messages


async def entries(store: Store) -> dict[str, OutboxEntry]:
    return {e.call_id: e for e in (await store.list_outbox(limit=1000)).items}


async def is_open(store: Store, call_id: str) -> bool:
    entry = (await entries(store)).get(call_id)
    return entry is not None and entry.status in ("pending", "running")


def done(entry: OutboxEntry, content: str = "result", **kw: object) -> OutboxOutcome:
    assert entry.token is not None
    return OutboxOutcome(entry_id=entry.id, token=entry.token, kind="done", content=content, **kw)  # type: ignore[arg-type]


async def results_of(store: Store, thread_id: str) -> list[tuple[str, str, bool]]:
    """(call id, content, is_error) of the pending tool results of a thread."""
    claims = await store.claim_threads("probe", 1000, LEASE)
    try:
        mine = [c for c in claims if c.thread_id == thread_id]
        if not mine:
            return []
        load = await store.load_slice(mine[0], ViewLimits())
        out = []
        for item in load.inputs:
            assert item.kind == "tool_result" and item.call_id is not None
            assert item.dedup_key == item.call_id
            out.append((item.call_id, item.content, item.is_error))
        return out
    finally:
        for c in claims:
            await store.release(c)


async def test_claim_outbox_leases_due_entries(store: Store, clock: FakeClock) -> None:
    await turn(
        store,
        "t1",
        "k1",
        calls=[call("c1", "fetch", idempotent=True, arguments='{"u":1}'), call("c2", "pay")],
    )
    claimed = await store.claim_outbox("w1", 10, 60.0)
    assert [(e.call_id, e.tool, e.arguments, e.idempotent) for e in claimed] == [
        ("c1", "fetch", '{"u":1}', True),
        ("c2", "pay", "{}", False),
    ]
    for e in claimed:
        assert (e.thread_id, e.agent, e.status, e.attempts) == ("t1", "a", "running", 1)
        assert e.token
    assert await store.claim_outbox("w2", 10, 60.0) == [], "a running entry is leased"
    listed = await entries(store)
    assert {e.status for e in listed.values()} == {"running"}


async def test_claim_outbox_respects_the_limit(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call(f"c{i}") for i in range(5)])
    assert await store.claim_outbox("w", 0, 60.0) == []
    assert len(await store.claim_outbox("w", 2, 60.0)) == 2
    assert len(await store.claim_outbox("w", 10, 60.0)) == 3
    assert await store.claim_outbox("w", 10, 60.0) == []


async def test_done_admits_the_result_with_the_call_id_as_dedup_key(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "fetch")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    assert await store.finish_outbox([done(entry, "42")]) == [True]
    assert not await is_open(store, "c1")
    assert await results_of(store, "t1") == [("c1", "42", False)]
    c, load = await take(store, "t1")
    (item,) = load.inputs
    assert (item.tool_name, item.kind) == ("fetch", "tool_result")
    await store.commit_slice(plan(c, load, reply="thanks"))
    roles = [m.role for m in await all_messages(store, "t1")]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert not await store.has_work()


async def test_an_error_result_is_marked(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    await store.finish_outbox([done(entry, "error: nope", is_error=True, error="nope")])
    assert await results_of(store, "t1") == [("c1", "error: nope", True)]


async def test_finish_needs_the_lease_and_records_once(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    forged = OutboxOutcome(entry_id=entry.id, token="forged", kind="done", content="fake")
    assert await store.finish_outbox([forged]) == [False]
    assert await is_open(store, "c1")
    assert await store.finish_outbox([done(entry, "real")]) == [True]
    assert await store.finish_outbox([done(entry, "again")]) == [False]
    assert await results_of(store, "t1") == [("c1", "real", False)]


async def test_finish_answers_per_outcome_in_one_call(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1"), call("c2")])
    e1, e2 = await store.claim_outbox("w", 10, 60.0)
    forged = OutboxOutcome(entry_id=e2.id, token="forged", kind="done", content="x")
    assert await store.finish_outbox([done(e1, "one"), forged]) == [True, False]
    assert await results_of(store, "t1") == [("c1", "one", False)]


async def test_retry_makes_the_entry_due_again_at_retry_at(store: Store, clock: FakeClock) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    assert entry.token is not None
    retry = OutboxOutcome(
        entry_id=entry.id, token=entry.token, kind="retry", retry_at=clock.now + 5, error="flaky"
    )
    assert await store.finish_outbox([retry]) == [True]
    listed = (await entries(store))["c1"]
    assert (listed.status, listed.last_error, listed.attempts) == ("pending", "flaky", 1)
    assert await results_of(store, "t1") == []
    assert await store.claim_outbox("w", 10, 60.0) == []
    assert await store.has_work(), "a call waiting for its retry is open work"
    clock.advance(5)
    (again,) = await store.claim_outbox("w", 10, 60.0)
    assert again.attempts == 2 and again.token != entry.token
    assert await store.finish_outbox([done(entry)]) == [False], "the old attempt's lease is gone"


async def test_dead_letters_stay_visible_and_answer_the_call(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    assert entry.token is not None
    dead = OutboxOutcome(
        entry_id=entry.id,
        token=entry.token,
        kind="dead",
        content="error: gave up",
        is_error=True,
        error="gave up",
    )
    assert await store.finish_outbox([dead]) == [True]
    listed = (await entries(store))["c1"]
    assert (listed.status, listed.last_error) == ("dead", "gave up")
    assert await results_of(store, "t1") == [("c1", "error: gave up", True)]
    status = await store.status()
    assert status.dead_letters == 1 and status.outbox_by_status.get("dead") == 1
    assert [e.call_id for e in (await store.list_outbox(status="dead")).items] == ["c1"]


async def test_an_expired_idempotent_call_is_run_again(store: Store, clock: FakeClock) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", idempotent=True)])
    (first,) = await store.claim_outbox("crashed-worker", 10, 60.0)
    clock.advance(59)
    assert await store.claim_outbox("w2", 10, 60.0) == []
    clock.advance(1)
    (second,) = await store.claim_outbox("w2", 10, 60.0)
    assert (second.call_id, second.attempts) == ("c1", 2)
    assert await store.finish_outbox([done(first, "stale")]) == [False]
    assert await store.finish_outbox([done(second, "fresh")]) == [True]
    assert await results_of(store, "t1") == [("c1", "fresh", False)]


async def test_an_expired_non_idempotent_call_becomes_unknown_and_is_answered_once(
    store: Store, clock: FakeClock
) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "pay")])
    (first,) = await store.claim_outbox("crashed-worker", 10, 60.0)
    clock.advance(61)
    assert await store.has_work(), "an expired running call still needs reconciling"
    assert await store.claim_outbox("w2", 0, 60.0) == [], "reconciles even when it claims nothing"
    listed = (await entries(store))["c1"]
    assert listed.status == "unknown" and listed.last_error
    for _ in range(3):
        assert await store.claim_outbox("w2", 10, 60.0) == []
    assert await store.finish_outbox([done(first, "late success")]) == [False]
    assert await results_of(store, "t1") == [("c1", UNKNOWN_OUTCOME, True)]
    assert (await store.status()).outbox_by_status.get("unknown") == 1


async def test_a_result_admitted_before_the_call_finished_is_not_duplicated(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    await store.admit([result("t1", "c1", "posted by hand")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    assert await store.finish_outbox([done(entry, "from the dispatcher")]) == [True]
    assert await results_of(store, "t1") == [("c1", "posted by hand", False)]


async def test_an_oversized_result_is_refused_and_changes_nothing(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1")])
    (entry,) = await store.claim_outbox("w", 10, 60.0)
    with pytest.raises(DormantError):
        await store.finish_outbox([done(entry, "x" * (2 * 1024 * 1024))])
    assert await is_open(store, "c1")
    assert await results_of(store, "t1") == []
    assert await store.finish_outbox([done(entry, "small")]) == [True]


async def test_results_reach_the_right_threads(store: Store) -> None:
    await turn(store, "a", "k", calls=[call("same-id")])
    await turn(store, "b", "k", calls=[call("same-id")])
    claimed = await store.claim_outbox("w", 10, 60.0)
    assert sorted(e.thread_id for e in claimed) == ["a", "b"]
    await store.finish_outbox([done(e, f"for {e.thread_id}") for e in claimed])
    assert await results_of(store, "a") == [("same-id", "for a", False)]
    assert await results_of(store, "b") == [("same-id", "for b", False)]
    assert await pending_inputs(store, "a") == ["same-id"]


async def test_complete_call_answers_an_open_call_once(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "pay"), call("c2", "pay")])
    claimed = {e.call_id: e for e in await store.claim_outbox("w1", 10, 60.0)}
    first = await store.complete_call("t1", "c1", "paid by webhook")
    assert not first.duplicate and first.dedup_key == "c1"
    again = await store.complete_call("t1", "c1", "paid twice?")
    assert again.duplicate and again.input_id == first.input_id
    assert not await is_open(store, "c1"), "an answered call leaves the outbox"
    # the dispatcher finishing the same call later changes nothing
    assert await store.finish_outbox([done(claimed["c1"], "from the dispatcher")]) == [False]
    assert await results_of(store, "t1") == [("c1", "paid by webhook", False)]


async def test_complete_call_refuses_unknown_calls(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "pay")])
    with pytest.raises(DormantError) as info:
        await store.complete_call("t1", "nope", "x")
    assert info.value.code == "not_found"
    with pytest.raises(DormantError):
        await store.complete_call("t1", "c1", "x" * (2 * 1024 * 1024))
    assert await is_open(store, "c1"), "a refused answer leaves the call open"


async def test_a_user_key_equal_to_a_call_id_never_swallows_the_result(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1"), call("c2")])
    # a user sends, keyed like the calls (a future call id, say): another namespace
    sent = await store.admit([user("t1", "c1", "keyed like c1"), user("t1", "c2", "keyed like c2")])
    assert [(a.dedup_key, a.duplicate) for a in sent] == [("c1", False), ("c2", False)]
    assert [(a.dedup_key, a.duplicate) for a in await store.admit([user("t1", "c1", "again")])] == [
        ("c1", True)
    ]
    claimed = {e.call_id: e for e in await store.claim_outbox("w", 10, LEASE)}
    assert await store.finish_outbox([done(claimed["c1"], "the real result")]) == [True]
    answer = await store.complete_call("t1", "c2", "answered from outside")
    assert not answer.duplicate and answer.dedup_key == "c2"
    # both results reached the thread (it waits for them), then the user's inputs
    c, load = await take(store, "t1")
    assert [(i.kind, i.dedup_key, i.content) for i in load.inputs] == [
        ("tool_result", "c1", "the real result"),
        ("tool_result", "c2", "answered from outside"),
    ]
    await store.commit_slice(plan(c, load))
    assert await pending_inputs(store, "t1") == ["c1", "c2"]


async def test_a_key_in_the_user_namespace_form_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput):
        await store.admit([user("t1", USER_KEY_PREFIX + "c1")])


async def test_a_dead_or_unknown_call_is_resolved_once_and_only_in_its_tenant(
    store: Store, clock: FakeClock
) -> None:
    await turn(store, "t1", "k1", calls=[call("c1"), call("c2", "pay")])
    (first, second) = sorted(await store.claim_outbox("w", 10, 60.0), key=lambda e: e.call_id)
    assert first.token is not None
    dead = OutboxOutcome(
        entry_id=first.id, token=first.token, kind="dead", content="error", is_error=True, error="gave up"
    )
    assert await store.finish_outbox([dead]) == [True]
    with pytest.raises(NotFound):  # still running: not resolvable
        await store.resolve_call(second.id)
    with pytest.raises(NotFound):  # the default tenant's call, asked for by a tenant
        await store.resolve_call(first.id, tenant="t0123456789ab")
    resolved = await store.resolve_call(first.id)
    assert (resolved.call_id, resolved.status, resolved.last_error) == ("c1", "dead", "gave up")
    assert "c1" not in await entries(store)
    assert await results_of(store, "t1") == [("c1", "error", True)]  # the thread keeps its result
    assert (await store.status()).dead_letters == 0
    with pytest.raises(NotFound):
        await store.resolve_call(first.id)
    with pytest.raises(NotFound):
        await store.resolve_call(10**9)
