"""Contract: heterogeneous workers. A worker claims only threads of the
agents it hosts and calls of the tools it has; the rest wait (``dormant status`` shows
the ready threads by agent), they are never claimed, failed or dead-lettered by it."""

from __future__ import annotations

from dormant.records import READY_AGENTS_SHOWN
from dormant.store.base import Store
from tests.contract.support import LEASE, call, turn, user


async def test_a_worker_claims_only_the_threads_of_its_agents(store: Store) -> None:
    await store.admit([user("a1", "k"), user("b1", "k", agent="b"), user("b2", "k", agent="b")])
    assert await store.claim_threads("w-c", 10, LEASE, agents=["c"]) == []
    assert await store.claim_threads("w-none", 10, LEASE, agents=[]) == []
    status = await store.status()
    assert status.ready_by_agent == {"b": 2, "a": 1}, "nothing was claimed: all wait"
    (only_a,) = await store.claim_threads("w-a", 10, LEASE, agents=["a"])
    assert (only_a.thread_id, only_a.agent) == ("a1", "a")
    assert (await store.status()).ready_by_agent == {"b": 2}, "a leased thread is not waiting"
    rest = await store.claim_threads("w-any", 10, LEASE)
    assert sorted(c.thread_id for c in rest) == ["b1", "b2"], "no filter: any agent"


async def test_a_worker_claims_only_the_calls_of_its_tools(store: Store) -> None:
    await turn(store, "t1", "k1", calls=[call("c1", "fetch"), call("c2", "pay")])
    assert await store.claim_outbox("w", 10, LEASE, tools=[("b", "fetch"), ("a", "mail")]) == []
    (fetch,) = await store.claim_outbox("w", 10, LEASE, tools=[("a", "fetch")])
    assert fetch.call_id == "c1"
    (pay,) = await store.claim_outbox("w", 10, LEASE)
    assert pay.call_id == "c2"


async def test_status_names_a_bounded_number_of_agents(store: Store) -> None:
    await store.admit([user(f"t{n}", "k", agent=f"agent{n:02}") for n in range(READY_AGENTS_SHOWN + 5)])
    shown = (await store.status()).ready_by_agent
    assert len(shown) == READY_AGENTS_SHOWN
    assert set(shown.values()) == {1}
