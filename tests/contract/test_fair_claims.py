"""Contract: claims are fair across tenants, and a tenant's leases can be capped.

A tenant's flood of old bulk input must not stand in front of another tenant's urgent
input: the claim shares slices out between the tenants with ready work (a tenant's
k-th thread stands at the leases it holds + k), each tenant's threads best key first.
"""

from __future__ import annotations

import pytest

from dormant.errors import UsageError
from dormant.records import Priority
from dormant.store.base import Store
from dormant.tenants.scope import Scope, tenant_of
from tests.contract.support import LEASE, user
from tests.helpers import FakeClock

FLOOD = 1_000


async def flood(store: Store, scope: Scope, count: int = FLOOD) -> None:
    """``count`` threads of the tenant, each with one bulk (P2) input."""
    items = [user(scope.inner(f"bulk-{n:04d}"), "k", priority=Priority.P2) for n in range(count)]
    for start in range(0, count, 250):
        await store.admit(items[start : start + 250])


async def tenants(store: Store) -> tuple[Scope, Scope]:
    a = Scope((await store.create_tenant("flooder")).id)
    b = Scope((await store.create_tenant("quiet")).id)
    return a, b


async def test_a_flood_of_old_bulk_input_does_not_starve_another_tenants_p0(
    store: Store, clock: FakeClock
) -> None:
    a, b = await tenants(store)
    await flood(store, a)
    clock.advance(120)  # a's bulk input has aged past P0: by key alone it all comes first
    await store.admit([user(b.inner("urgent"), "k", priority=Priority.P0)])

    claims = await store.claim_threads("w1", 8, LEASE)  # the first claim round
    claimed = [c.thread_id for c in claims]
    assert b.inner("urgent") in claimed
    assert len(claimed) == 8
    assert sum(a.owns(t) for t in claimed) == 7  # the rest of the round is the flooder's


async def test_the_next_free_slot_goes_to_the_tenant_holding_fewer_leases(
    store: Store, clock: FakeClock
) -> None:
    a, b = await tenants(store)
    await flood(store, a, 50)
    clock.advance(120)  # a's bulk input has aged past P0 (the leases below stay live)
    held = await store.claim_threads("w1", 4, LEASE)  # only a has work: a takes 4 slots
    assert all(a.owns(c.thread_id) for c in held)
    await store.admit([user(b.inner("urgent"), "k", priority=Priority.P0)])
    await store.admit([user(b.inner("later"), "k", priority=Priority.P2)])
    # one slot frees, on another worker: b (no lease) comes before a (4 leases), and then
    # b's second thread too (place 2 < a's place 5), however old a's input is
    (first,) = await store.claim_threads("w2", 1, LEASE)
    assert first.thread_id == b.inner("urgent")
    (second,) = await store.claim_threads("w2", 1, LEASE)
    assert second.thread_id == b.inner("later")
    # b has nothing left: a's next
    (third,) = await store.claim_threads("w2", 1, LEASE)
    assert a.owns(third.thread_id)


async def test_slices_are_shared_round_robin_and_the_default_tenant_is_a_tenant(
    store: Store, clock: FakeClock
) -> None:
    a, b = await tenants(store)
    await flood(store, a, 20)
    clock.advance(1)
    await flood(store, b, 20)
    clock.advance(1)
    await store.admit([user(f"lib-{n}", "k") for n in range(20)])  # the library's threads
    claims = await store.claim_threads("w1", 9, LEASE)
    by_tenant: dict[str, int] = {}
    for c in claims:
        by_tenant[tenant_of(c.thread_id)] = by_tenant.get(tenant_of(c.thread_id), 0) + 1
    assert by_tenant == {a.tenant_id: 3, b.tenant_id: 3, "": 3}


async def test_a_tenant_never_holds_more_leases_than_its_cap(store: Store, clock: FakeClock) -> None:
    a, b = await tenants(store)
    await flood(store, a, 30)
    first = await store.claim_threads("w1", 10, LEASE, tenant_slices=3)
    assert len(first) == 3
    assert await store.claim_threads("w2", 10, LEASE, tenant_slices=3) == []  # over every worker
    await store.admit([user(b.inner("x"), "k")])
    (other,) = await store.claim_threads("w2", 10, LEASE, tenant_slices=3)
    assert other.thread_id == b.inner("x")
    await store.release(first[0])  # a slice ends: its tenant may claim one more
    assert len(await store.claim_threads("w2", 10, LEASE, tenant_slices=3)) == 1
    # an expired lease is not held any more
    clock.advance(LEASE + 1)
    assert len(await store.claim_threads("w3", 10, LEASE, tenant_slices=3)) == 3 + 1
    with pytest.raises(UsageError):
        await store.claim_threads("w3", 10, LEASE, tenant_slices=-1)


async def test_within_a_tenant_the_best_key_comes_first(store: Store, clock: FakeClock) -> None:
    a, _ = await tenants(store)
    await flood(store, a, 10)
    await store.admit([user(a.inner("urgent"), "k", priority=Priority.P0)])
    (c,) = await store.claim_threads("w1", 1, LEASE)
    assert c.thread_id == a.inner("urgent")
