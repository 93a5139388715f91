"""Contract: waits for a person (approvals and questions), their rows and transitions.

A slice commits a call that needs approval as a wait, not an outbox entry; a decision
acts on it once, in one transaction: approve puts it in the outbox, deny and expiry
admit its result; a second, different decision is a conflict carrying the first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from dormant.errors import DecisionConflict, InvalidInput, NotFound
from dormant.records import NewApproval
from dormant.store.base import Store
from tests.contract.support import call, pending_inputs, plan, take, user
from tests.helpers import FakeClock

TENANT = "t0123456789ab"


async def waiting(
    store: Store, thread_id: str = "t1", call_id: str = "c1", *, deadline: float = 0.0, **extra: Any
) -> None:
    """``thread_id``'s slice asked for ``refund`` (call ``call_id``), which needs approval."""
    await store.admit([user(thread_id, f"k-{call_id}", "refund me", agent="a")])
    c, load = await take(store, thread_id)
    p = plan(c, load, reply="", calls=[call(call_id, "refund", arguments='{"amount": 120}')])
    wait = NewApproval(
        call_id=call_id, tool="refund", arguments='{"amount": 120}', deadline=deadline, **extra
    )
    await store.commit_slice(msgspec.structs.replace(p, calls=(), approvals=(wait,)))


async def outbox_calls(store: Store) -> list[tuple[str, str]]:
    return [(e.call_id, e.arguments) for e in (await store.list_outbox()).items]


async def test_a_call_awaiting_approval_is_a_wait_not_an_outbox_entry(store: Store) -> None:
    await waiting(store)
    page = await store.approvals()
    assert [(a.thread_id, a.call_id, a.status, a.tool) for a in page.items] == [
        ("t1", "c1", "requested", "refund")
    ]
    assert page.items[0].arguments == '{"amount": 120}'
    assert await outbox_calls(store) == []
    assert (await store.get_thread("t1")).awaiting == 1
    assert await pending_inputs(store, "t1") == []


async def test_approve_puts_the_call_in_the_outbox_exactly_once(store: Store) -> None:
    await waiting(store)
    fresh, row = await store.decide_approval(
        "t1", "c1", status="approved", arguments='{"amount": 120}', by="ann", key="d1"
    )
    assert fresh and row.status == "approved" and row.decided_by == "ann"
    again, same = await store.decide_approval(
        "t1", "c1", status="approved", arguments='{"amount": 120}', by="ann", key="d1"
    )
    assert not again and same.decision_key == "d1"
    with pytest.raises(DecisionConflict) as info:
        await store.decide_approval("t1", "c1", status="denied", result="no", by="bob", key="d2")
    assert info.value.first is not None and info.value.first.status == "approved"  # type: ignore[attr-defined]
    assert await outbox_calls(store) == [("c1", '{"amount": 120}')]
    assert (await store.approvals()).items == ()
    history = (await store.approvals(status="all")).items
    assert [a.status for a in history] == ["approved"]


async def test_an_edit_runs_the_edited_arguments_and_keeps_the_models(store: Store) -> None:
    await waiting(store)
    await store.decide_approval("t1", "c1", status="edited", arguments='{"amount": 50}', by="ann")
    assert await outbox_calls(store) == [("c1", '{"amount": 50}')]
    row = await store.approval("t1", "c1")
    assert (row.arguments, row.decided_arguments, row.status) == (
        '{"amount": 120}',
        '{"amount": 50}',
        "edited",
    )


async def test_deny_admits_the_result_and_never_the_call(store: Store) -> None:
    await waiting(store)
    await store.decide_approval(
        "t1", "c1", status="denied", result="denied by ann: too much", by="ann", note="too much"
    )
    assert await outbox_calls(store) == []
    assert await pending_inputs(store, "t1") == ["c1"]
    row = await store.approval("t1", "c1")
    assert (row.status, row.note, row.decided_by) == ("denied", "too much", "ann")


async def test_expiry_is_its_own_outcome_and_a_late_approval_conflicts(
    store: Store, clock: FakeClock
) -> None:
    await waiting(store, deadline=clock.now + 60)
    await waiting(store, "t2", "c2")  # no deadline: open until someone acts
    assert await store.expire_approvals() == (0, 0)
    clock.advance(61)
    assert await store.expire_approvals() == (1, 0)
    row = await store.approval("t1", "c1")
    assert row.status == "expired" and row.decided_by is None
    assert await pending_inputs(store, "t1") == ["c1"]
    with pytest.raises(DecisionConflict):
        await store.decide_approval("t1", "c1", status="approved", arguments="{}")
    assert await outbox_calls(store) == []
    assert [a.call_id for a in (await store.approvals()).items] == ["c2"]


async def test_escalation_hands_the_wait_on_once_then_expires(store: Store, clock: FakeClock) -> None:
    await waiting(store, deadline=clock.now + 10, escalate_role="manager", escalate_s=30.0)
    clock.advance(11)
    assert await store.expire_approvals() == (0, 1)
    row = await store.approval("t1", "c1")
    assert (row.status, row.role) == ("escalated", "manager")
    clock.advance(31)
    assert await store.expire_approvals() == (1, 0)
    assert (await store.approval("t1", "c1")).status == "expired"


async def test_twenty_concurrent_decisions_one_wins(store: Store) -> None:
    await waiting(store)

    async def decide(n: int) -> str:
        try:
            await store.decide_approval(
                "t1", "c1", status="approved", arguments="{}", key=f"k{n}", by=f"p{n}"
            )
        except DecisionConflict:
            return "conflict"
        return "won"

    outcomes = await asyncio.gather(*(decide(n) for n in range(20)))
    assert sorted(outcomes).count("won") == 1 and outcomes.count("conflict") == 19
    assert len(await outbox_calls(store)) == 1


async def test_approve_and_expiry_at_once_have_one_outcome(store: Store, clock: FakeClock) -> None:
    await waiting(store, deadline=clock.now + 5)
    clock.advance(5)
    approve = store.decide_approval("t1", "c1", status="approved", arguments="{}")
    results = await asyncio.gather(approve, store.expire_approvals(), return_exceptions=True)
    row = await store.approval("t1", "c1")
    assert row.status in ("approved", "expired")
    outbox = await outbox_calls(store)
    results_in = await pending_inputs(store, "t1")
    assert (len(outbox), len(results_in)) == ((1, 0) if row.status == "approved" else (0, 1))
    assert isinstance(results[0], DecisionConflict) == (row.status == "expired")


async def test_bad_decisions_change_nothing(store: Store) -> None:
    await waiting(store)
    with pytest.raises(NotFound):
        await store.decide_approval("t1", "nope", status="approved", arguments="{}")
    with pytest.raises(InvalidInput):
        await store.decide_approval("t1", "c1", status="denied", note="x" * 10_000_000)
    with pytest.raises(NotFound):
        await store.decide_approval("t1", "c1", status="approved", arguments="{}", tenant=TENANT)
    assert (await store.approval("t1", "c1")).status == "requested"
    assert await outbox_calls(store) == []


async def test_waits_are_tenant_scoped_and_paged(store: Store) -> None:
    for n in range(5):
        await waiting(store, f"t{n}", f"c{n}")
    await waiting(store, f"{TENANT}/x", "cx")
    mine = await store.approvals(tenant=TENANT)
    assert [a.thread_id for a in mine.items] == [f"{TENANT}/x"]
    with pytest.raises(NotFound):
        await store.approval("t1", "c1", tenant=TENANT)
    first = await store.approvals(tenant="", limit=3)
    assert len(first.items) == 3 and first.next_cursor is not None
    rest = await store.approvals(tenant="", cursor=first.next_cursor, limit=3)
    assert [a.call_id for a in first.items + rest.items] == ["c0", "c1", "c2", "c3", "c4"]
    assert rest.next_cursor is None
    assert (await store.open_approvals())[0] == 6
    assert [a.call_id for a in (await store.approvals(thread_id="t3")).items] == ["c3"]


async def test_deleting_a_thread_deletes_its_waits(store: Store) -> None:
    await waiting(store)
    await waiting(store, "t2", "c2")
    await store.delete_thread("t1")
    assert [a.thread_id for a in (await store.approvals(status="all")).items] == ["t2"]
    with pytest.raises(NotFound):
        await store.decide_approval("t1", "c1", status="approved", arguments="{}")
