"""Contract: threads and admission (durable, deduplicated, all or nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.errors import InvalidInput, NotFound
from dormant.inbox import DEFAULT_MAX_INPUT_BYTES
from dormant.records import NewInput, Priority, ViewLimits
from dormant.store.base import Store
from tests.contract.conftest import Backend
from tests.contract.support import pending_inputs, plan, ready_ids, take, user
from tests.helpers import FakeClock


async def test_create_thread_is_idempotent(store: Store, clock: FakeClock) -> None:
    first = await store.create_thread("t1", "a")
    assert (first.id, first.agent, first.status, first.last_seq, first.awaiting) == (
        "t1",
        "a",
        "active",
        0,
        0,
    )
    assert first.created_at == clock.now
    clock.advance(5)
    again = await store.create_thread("t1", "other-agent")
    assert again.agent == "a" and again.created_at == first.created_at
    assert await store.get_thread("t1") == again


async def test_unknown_thread_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.get_thread("nope")


async def test_admit_creates_the_thread_and_a_ready_input(store: Store, clock: FakeClock) -> None:
    (adm,) = await store.admit([user("t1", "k1", "hello")])
    assert (adm.thread_id, adm.dedup_key, adm.duplicate) == ("t1", "k1", False)
    assert adm.input_id > 0
    thread = await store.get_thread("t1")
    assert thread.agent == "a"
    assert await ready_ids(store) == ["t1"]
    _, load = await take(store, "t1")
    (item,) = load.inputs
    assert (item.id, item.thread_id, item.kind, item.dedup_key, item.content) == (
        adm.input_id,
        "t1",
        "user",
        "k1",
        "hello",
    )
    assert item.admitted_at == clock.now and item.priority == Priority.P1


async def test_every_field_of_an_input_round_trips(store: Store) -> None:
    await store.create_thread("t1", "a")
    await store.admit(
        [
            NewInput(
                thread_id="t1",
                kind="tool_result",
                dedup_key="d",
                content="payload ✓",
                priority=Priority.P0,
                not_before=5.0,
                call_id="call-1",
                tool_name="lookup",
                is_error=True,
                source="src",
            )
        ]
    )
    _, load = await take(store, "t1")
    (item,) = load.inputs
    assert (item.kind, item.content, item.priority, item.not_before) == (
        "tool_result",
        "payload ✓",
        Priority.P0,
        5.0,
    )
    assert (item.call_id, item.tool_name, item.is_error, item.source) == ("call-1", "lookup", True, "src")


async def test_admission_is_durable(backend: Backend, store: Store, tmp_path: Path, clock: FakeClock) -> None:
    if not backend.durable:
        pytest.skip(f"the {backend.name} store is not durable by design")
    (adm,) = await store.admit([user("t1", "k1", "kept")])
    await store.close()
    reopened = backend.make(tmp_path, clock)
    await reopened.open()
    try:
        again = await reopened.admit([user("t1", "k1", "kept")])
        assert again[0].duplicate and again[0].input_id == adm.input_id
        assert await pending_inputs(reopened, "t1") == ["k1"]
    finally:
        await reopened.close()
        await store.open()  # the fixture closes it again


async def test_duplicate_admission_returns_the_same_input_and_changes_nothing(store: Store) -> None:
    (first,) = await store.admit([user("t1", "k1", "original")])
    (dup,) = await store.admit([user("t1", "k1", "changed", priority=Priority.P0)])
    assert dup.duplicate and dup.input_id == first.input_id
    status = await store.status()
    assert status.backlog_by_priority == {"P1": 1}
    _, load = await take(store, "t1")
    assert [(i.content, i.priority) for i in load.inputs] == [("original", Priority.P1)]


async def test_duplicate_of_a_consumed_input_is_still_a_duplicate(store: Store) -> None:
    (first,) = await store.admit([user("t1", "k1")])
    c, load = await take(store, "t1")
    await store.commit_slice(plan(c, load))
    (dup,) = await store.admit([user("t1", "k1")])
    assert dup.duplicate and dup.input_id == first.input_id
    assert not await store.has_work()


async def test_duplicates_within_one_batch(store: Store) -> None:
    a, b = await store.admit([user("t1", "k1", "one"), user("t1", "k1", "two")])
    assert not a.duplicate and b.duplicate and a.input_id == b.input_id
    assert await pending_inputs(store, "t1") == ["k1"]


async def test_same_key_on_another_thread_is_another_input(store: Store) -> None:
    a, b = await store.admit([user("t1", "k"), user("t2", "k")])
    assert not a.duplicate and not b.duplicate and a.input_id != b.input_id


async def test_admit_to_a_missing_thread_without_agent_is_not_found(store: Store) -> None:
    with pytest.raises(NotFound):
        await store.admit([user("ghost", "k1", agent=None)])
    with pytest.raises(NotFound):
        await store.get_thread("ghost")
    assert not await store.has_work()


async def test_a_batch_commits_all_or_nothing(store: Store) -> None:
    await store.create_thread("t0", "a")
    batch = [user("t0", "k0"), user("t1", "k1"), user("ghost", "k2", agent=None)]
    with pytest.raises(NotFound):
        await store.admit(batch)
    with pytest.raises(NotFound):
        await store.get_thread("t1")
    assert await ready_ids(store) == []
    status = await store.status()
    assert sum(status.backlog_by_priority.values()) == 0
    # the same batch without the bad item goes through, as new inputs
    admitted = await store.admit(batch[:2])
    assert [a.duplicate for a in admitted] == [False, False]


async def test_a_batch_may_create_a_thread_and_admit_to_it(store: Store) -> None:
    admitted = await store.admit([user("t1", "k1"), user("t1", "k2", agent=None)])
    assert [a.duplicate for a in admitted] == [False, False]
    assert await pending_inputs(store, "t1") == ["k1", "k2"]


async def test_oversize_input_is_refused_before_anything_is_written(store: Store) -> None:
    big = "x" * (DEFAULT_MAX_INPUT_BYTES + 1)
    with pytest.raises(InvalidInput):
        await store.admit([user("t1", "k1"), user("t2", "k2", big)])
    with pytest.raises(NotFound):
        await store.get_thread("t1")
    assert not await store.has_work()


async def test_malformed_inputs_are_refused(store: Store) -> None:
    await store.create_thread("t1", "a")
    with pytest.raises(InvalidInput):
        await store.admit([NewInput(thread_id="t1", kind="tool_result", dedup_key="c1", content="r")])
    with pytest.raises(InvalidInput):
        await store.admit([user("t1", "")])
    assert not await store.has_work()


@pytest.mark.parametrize(
    "field", ["content", "dedup_key", "thread_id", "source", "agent"], ids=lambda f: f"nul_in_{f}"
)
async def test_a_nul_character_is_refused_on_every_backend(store: Store, field: str) -> None:
    good = user("t1", "k1", "before")
    bad = user("t2", "k2", "text")
    bad = NewInput(**{**{f: getattr(bad, f) for f in bad.__struct_fields__}, field: "a\x00b"})
    with pytest.raises(InvalidInput, match="NUL"):
        await store.admit([good, bad])
    with pytest.raises(NotFound):  # the whole batch was refused
        await store.get_thread("t1")
    await store.create_thread("t3", "a")
    with pytest.raises(InvalidInput, match="NUL"):
        await store.complete_call("t3", "c1", "a\x00b")


async def test_inputs_to_a_failed_thread_wait_until_it_is_retried(store: Store) -> None:
    await store.admit([user("t1", "k1")])
    c, _ = await take(store, "t1")
    await store.release(c, error="boom", fail=True)
    (adm,) = await store.admit([user("t1", "k2")])
    assert not adm.duplicate
    assert await ready_ids(store) == []
    await store.retry_thread("t1")
    assert await pending_inputs(store, "t1") == ["k1", "k2"]


async def test_load_limits_apply_to_admitted_inputs(store: Store) -> None:
    await store.admit([user("t1", f"k{i}", "y" * 100) for i in range(10)])
    c, load = await take(store, "t1", ViewLimits(max_inputs=3))
    assert [i.dedup_key for i in load.inputs] == ["k0", "k1", "k2"]
    load = await store.load_slice(c, ViewLimits(max_input_bytes=250))
    assert [i.dedup_key for i in load.inputs] == ["k0", "k1"]
    load = await store.load_slice(c, ViewLimits(max_input_bytes=10))
    assert [i.dedup_key for i in load.inputs] == ["k0"], "one input is always loaded, whatever its size"
