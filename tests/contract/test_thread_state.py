"""The thread row carries its journal state, on every backend: a slice's load
has it at no extra query (``SliceLoad.state``), a commit that journals changes writes the
state its plan gives in the same transaction (or marks it unknown when the plan gives
none), and a thread created with state, forked or rewound starts with its state on the
row. Unknown (None) means: replay the journal; the row is never a wrong state."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from dormant.errors import LeaseLost, UsageError
from dormant.memory import MemoryConfig, MemoryCore, bind
from dormant.memory.registers import SUBJECT_KEY
from dormant.records import StateChange
from dormant.store.base import Store
from dormant.store.rows import MAX_ROW_STATE_BYTES, state_row
from tests.contract.support import plan, take, user
from tests.helpers import KEY_SECRET, FakeClock

ALICE = bind({"phone": "+15550100", "device": "alice-phone"}, secret=KEY_SECRET, tenant="")


def put(key: str, value: object) -> StateChange:
    return StateChange(op="update", key=key, value=msgspec.json.encode(value).decode())


async def loaded_state(store: Store, thread_id: str, key: str) -> dict[str, str] | None:
    await store.admit([user(thread_id, key)])
    c, load = await take(store, thread_id)
    await store.release(c)
    return load.state


async def test_a_new_thread_carries_the_empty_state(store: Store) -> None:
    assert await loaded_state(store, "t", "k1") == {}


async def test_a_commit_writes_the_state_its_plan_gives_with_its_change_records(store: Store) -> None:
    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    changes = (put("a", 1), put(SUBJECT_KEY, ALICE))
    after = {"a": "1", SUBJECT_KEY: msgspec.json.encode(ALICE).decode()}
    state_json, subject = state_row(after)
    assert subject == ALICE
    committed = msgspec.structs.replace(plan(c, load), state=changes, state_json=state_json, subject=subject)
    await store.commit_slice(committed)
    assert await loaded_state(store, "t", "k2") == after == (await store.journal.recover("t")).state


async def test_changes_without_the_state_leave_it_unknown_never_wrong(store: Store) -> None:
    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    await store.commit_slice(msgspec.structs.replace(plan(c, load), state=(put("a", 1),)))
    assert await loaded_state(store, "t", "k2") is None, "the journal changed: the row cannot say"
    # a later slice that knows the state (it replayed the journal) writes it back
    c, load = await take(store, "t")
    state_json, _ = state_row({"a": "1"})
    await store.commit_slice(msgspec.structs.replace(plan(c, load), state_json=state_json))
    assert await loaded_state(store, "t", "k3") == {"a": "1"}


async def test_a_commit_without_changes_keeps_the_state(store: Store) -> None:
    await store.create_thread("t", "a", state={"a": "1"})
    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    assert load.state == {"a": "1"}
    await store.commit_slice(plan(c, load))
    assert await loaded_state(store, "t", "k2") == {"a": "1"}


async def test_a_failed_commit_changes_neither_journal_nor_row(store: Store) -> None:
    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    state_json, _ = state_row({"a": "1"})
    stale = msgspec.structs.replace(plan(c, load), token="lost", state=(put("a", 1),), state_json=state_json)
    with pytest.raises(LeaseLost):
        await store.commit_slice(stale)
    await store.release(c)
    assert await loaded_state(store, "t", "k2") == {} == (await store.journal.recover("t")).state


async def test_created_forked_and_rewound_threads_carry_their_state(store: Store) -> None:
    subject = msgspec.json.encode(ALICE).decode()
    await store.create_thread("t", "a", state={SUBJECT_KEY: subject, "a": "1"})
    assert await loaded_state(store, "t", "k1") == {SUBJECT_KEY: subject, "a": "1"}
    await store.fork_thread("t", "t-fork", 0, {"b": "2"})
    assert (
        await loaded_state(store, "t-fork", "k1")
        == {"b": "2"}
        == (await store.journal.recover("t-fork")).state
    )


async def test_a_state_over_the_row_bound_is_not_carried(store: Store) -> None:
    half = msgspec.json.encode("x" * (MAX_ROW_STATE_BYTES // 2)).decode()
    big = {"k1": half, "k2": half}
    assert state_row(big)[0] is None
    await store.create_thread("t", "a", state=big)
    assert await loaded_state(store, "t", "k1") is None
    await store.admit([user("t", "k2")])
    c, load = await take(store, "t")
    too_big = msgspec.structs.replace(plan(c, load), state_json="x" * (MAX_ROW_STATE_BYTES + 1))
    with pytest.raises(UsageError):
        await store.commit_slice(too_big)
    with pytest.raises(UsageError):
        await store.commit_slice(msgspec.structs.replace(plan(c, load), subject="not a binding key"))


async def test_a_subjects_other_active_threads_are_found_by_the_row(store: Store, clock: FakeClock) -> None:
    subject = msgspec.json.encode(ALICE).decode()
    bob = bind({"phone": "+15550100", "device": "bob-tablet"}, secret=KEY_SECRET, tenant="")
    for n in range(4):
        clock.advance(1)
        await store.create_thread(f"t{n}", "a", state={SUBJECT_KEY: subject})
    await store.create_thread("other", "a", state={SUBJECT_KEY: msgspec.json.encode(bob).decode()})
    # a slice's commit sets the subject of a thread created without one
    await store.admit([user("late", "k1")])
    c, load = await take(store, "late")
    await store.commit_slice(msgspec.structs.replace(plan(c, load), subject=ALICE))
    assert await store.subject_threads("t0", ALICE) == ["late", "t3", "t2", "t1"], "newest first, not t0"
    assert await store.subject_threads("t0", ALICE, limit=2) == ["late", "t3"]
    assert await store.subject_threads("t0", bob) == ["other"]
    # a failed thread is not open; another tenant's threads are never found
    await store.admit([user("t3", "k2")])
    c, _ = await take(store, "t3")
    await store.release(c, error="boom", fail=True)
    assert await store.subject_threads("t0", ALICE) == ["late", "t2", "t1"]
    assert await store.subject_threads("t00000000a002/x", ALICE) == []
    with pytest.raises(UsageError):
        await store.subject_threads("t0", ALICE, limit=0)


async def test_a_rekeyed_subject_is_journaled_on_its_threads(store: Store) -> None:
    """Moving a key to its new one (rotation here; a b1_ key of an older store alike)
    makes the new key each of its threads' subject: a journaled `_subject` change, the
    row's state and subject."""
    parts = {"phone": "+15550100", "device": "alice-phone"}
    before = MemoryCore(store.memory_rows(), None, MemoryConfig(binding_secret="1" * 32))
    old = await asyncio.to_thread(before.bind, "", parts)
    journaled = msgspec.json.encode(old).decode()
    await store.create_thread("t0", "a", state={SUBJECT_KEY: journaled, "a": "1"})
    await store.create_thread("t1", "a", state={SUBJECT_KEY: journaled})
    assert await store.subject_threads("t0", old) == ["t1"]
    after = MemoryCore(
        store.memory_rows(), None, MemoryConfig(binding_secret="2" * 32, previous_binding_secret="1" * 32)
    )
    new = await asyncio.to_thread(after.bind, "", parts)
    assert new != old
    assert await store.subject_threads("t0", new) == ["t1"]
    assert await store.subject_threads("t0", old) == []
    want = msgspec.json.encode(new).decode()
    assert (await store.journal.recover("t0")).state == {SUBJECT_KEY: want, "a": "1"}
    assert await loaded_state(store, "t0", "k1") == {SUBJECT_KEY: want, "a": "1"}, "the row too"
    assert await loaded_state(store, "t1", "k1") == {SUBJECT_KEY: want}
