"""Contract for backends that several workers (store objects, processes) share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dormant.store.base import Store
from tests.contract.conftest import Backend
from tests.contract.support import LEASE, plan, take, turn, user
from tests.helpers import FakeClock, all_messages


@pytest.fixture
async def other(backend: Backend, store: Store, tmp_path: Path, clock: FakeClock) -> AsyncIterator[Store]:
    """A second store object on the same database: another worker."""
    if not backend.shared:
        pytest.skip(f"the {backend.name} store lives in one process")
    second = backend.make(tmp_path, clock)
    await second.open()
    try:
        yield second
    finally:
        await second.close()


async def test_a_lease_excludes_other_store_objects(store: Store, other: Store, clock: FakeClock) -> None:
    await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    assert await other.claim_threads("w2", 10, LEASE) == []
    await store.commit_slice(plan(c, load))
    await other.admit([user("t1", "k2")])
    c2, load2 = await take(other, "t1", worker="w2")
    assert [i.dedup_key for i in load2.inputs] == ["k2"]
    await other.commit_slice(plan(c2, load2))
    assert len(await all_messages(store, "t1")) == 4


async def test_views_see_commits_made_by_other_workers(store: Store, other: Store) -> None:
    await turn(store, "t1", "k1", reply="from A")
    await store.admit([user("t1", "k2")])
    c, load = await take(store, "t1")
    assert [m.content for m in load.view] == ["text of k1", "from A"]
    await store.commit_slice(plan(c, load, reply="A again"))

    await other.admit([user("t1", "k3")])
    c, load = await take(other, "t1", worker="w2")
    await other.commit_slice(plan(c, load, reply="from B"))

    await store.admit([user("t1", "k4")])
    _, load = await take(store, "t1")
    assert [m.content for m in load.view] == [
        "text of k1",
        "from A",
        "text of k2",
        "A again",
        "text of k3",
        "from B",
    ]
    assert load.thread.last_seq == 6


async def test_dedup_holds_across_workers(store: Store, other: Store) -> None:
    (a,) = await store.admit([user("t1", "same")])
    (b,) = await other.admit([user("t1", "same")])
    assert b.duplicate and b.input_id == a.input_id


async def test_a_view_is_never_served_to_a_new_thread_under_a_deleted_id(
    store: Store, other: Store, clock: FakeClock
) -> None:
    await turn(store, "t1", "k1", reply="old reply")  # this worker caches t1's view at last_seq 2
    # another worker deletes t1, and it is created again, reaching the same last_seq
    await other.delete_thread("t1")
    clock.advance(1)
    await turn(other, "t1", "k2", reply="new reply")
    await store.admit([user("t1", "k3")])
    _, load = await take(store, "t1")
    assert [m.content for m in load.view] == ["text of k2", "new reply"]
