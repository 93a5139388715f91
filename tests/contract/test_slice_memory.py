"""A slice's memory writes commit with its plan, in the same transaction, on
every backend: a commit that succeeds writes messages and memories (with dedup,
supersession and history by ``thread:<id>``); a commit that fails — the lease lost, an
input not pending, a fault injected in the memory step after the plan's rows — writes
neither.

The memory writes are built the way a slice builds them
(:meth:`MemoryCore.prepare_writes`, in a worker thread: it embeds), then handed to
``commit_slice`` with the plan.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

import msgspec
import pytest

from dormant.errors import LeaseLost, StoreError, UsageError
from dormant.memory import DEFAULT_TENANT, HashingEmbedder, MemoryCore, MemoryRecord, NewMemory, bind
from dormant.memory.backend import MemoryWrites
from dormant.records import CommitPlan
from dormant.store.base import Store
from tests.contract.support import plan, take, user
from tests.helpers import KEY_SECRET

ALICE = bind({"phone": "+15550100", "device": "alice-phone"}, secret=KEY_SECRET, tenant="")
T = DEFAULT_TENANT


def fact(text: str, **tags: str) -> NewMemory:
    return NewMemory(subject=ALICE, text=text, tags=dict(tags), thread="t", source_thread="t")


async def writes(
    core: MemoryCore,
    news: Sequence[NewMemory],
    forgets: Sequence[tuple[Sequence[str], str, str]] = (),
    *,
    now: float = 1000.0,
) -> MemoryWrites:
    return await asyncio.to_thread(core.prepare_writes, T, news, forgets, actor="thread:t", now=now)


async def valid(core: MemoryCore) -> list[MemoryRecord]:
    page = await asyncio.to_thread(core.list, T, [ALICE], limit=50)
    return [r for r in page.items if r.invalid_at is None]


async def slice_with(store: Store, key: str, memory: MemoryWrites | None) -> CommitPlan:
    await store.admit([user("t", key)])
    c, load = await take(store, "t")
    return msgspec.structs.replace(plan(c, load), memory=memory)


async def test_a_committed_slice_writes_its_memories_with_its_messages(store: Store) -> None:
    core = MemoryCore(store.memory_rows(), HashingEmbedder(32))
    first = await slice_with(
        store, "k1", await writes(core, [fact("Ships to 12 Oak Street", key="address"), fact("Likes tea")])
    )
    await store.commit_slice(first)
    assert sorted(r.text for r in await valid(core)) == ["Likes tea", "Ships to 12 Oak Street"]
    tea = next(r for r in await valid(core) if r.text == "Likes tea")
    # the next slice supersedes by key, merges a duplicate and forgets a record
    news = [fact("Ships to 44 Pine Road", key="address"), fact("likes   TEA")]
    second = await slice_with(
        store, "k2", await writes(core, news, [([ALICE], tea.id, "no longer")], now=2000.0)
    )
    await store.commit_slice(second)
    assert [r.text for r in await valid(core)] == ["Ships to 44 Pine Road"]
    history = (await asyncio.to_thread(core.history, T, [ALICE], limit=50)).items
    assert {c.op for c in history} == {"add", "supersede", "update", "forget"}
    assert {c.actor for c in history} == {"thread:t"}
    assert len((await store.history("t")).items) == 4, "both slices' messages committed"


async def test_a_lost_lease_commits_neither_messages_nor_memories(store: Store) -> None:
    core = MemoryCore(store.memory_rows(), HashingEmbedder(32))
    stale = await slice_with(store, "k1", await writes(core, [fact("Ships to 12 Oak Street")]))
    with pytest.raises(LeaseLost):
        await store.commit_slice(msgspec.structs.replace(stale, token="not-the-lease"))
    assert await valid(core) == []
    assert (await store.history("t")).items == ()


async def test_an_input_not_pending_commits_neither(store: Store) -> None:
    core = MemoryCore(store.memory_rows(), HashingEmbedder(32))
    bad = await slice_with(store, "k1", await writes(core, [fact("Ships to 12 Oak Street")]))
    with pytest.raises(StoreError):
        await store.commit_slice(msgspec.structs.replace(bad, consumed=(*bad.consumed, 10**9)))
    assert await valid(core) == []
    assert (await store.history("t")).items == ()


async def test_a_fault_in_the_memory_step_rolls_the_whole_slice_back(store: Store) -> None:
    core = MemoryCore(store.memory_rows(), HashingEmbedder(32))
    good = await slice_with(store, "k0", await writes(core, [fact("Ships to 12 Oak Street", key="address")]))
    await store.commit_slice(good)
    built = await writes(core, [fact("Ships to 44 Pine Road", key="address")], now=2000.0)

    def fail(new: MemoryRecord, olds: Sequence[MemoryRecord]) -> tuple[list[str], float | None]:
        raise RuntimeError("injected: the commit dies after the plan's rows and the dedup read")

    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    with pytest.raises(Exception, match="injected"):
        await store.commit_slice(
            msgspec.structs.replace(plan(c, load), memory=dataclasses.replace(built, decide=fail))
        )
    await store.release(c)  # as the runner does after a failed slice
    assert [r.text for r in await valid(core)] == ["Ships to 12 Oak Street"]
    assert len((await store.history("t")).items) == 2, "only the first slice's messages"
    # the same slice, retried without the fault, commits both
    c, load = await take(store, "t")
    await store.commit_slice(msgspec.structs.replace(plan(c, load), memory=built))
    assert [r.text for r in await valid(core)] == ["Ships to 44 Pine Road"]
    assert len((await store.history("t")).items) == 4


async def test_memory_writes_of_another_tenant_are_refused(store: Store) -> None:
    core = MemoryCore(store.memory_rows(), HashingEmbedder(32))
    built = await writes(core, [fact("Ships to 12 Oak Street")])
    other = await slice_with(store, "k1", dataclasses.replace(built, tenant="t00000000a002"))
    with pytest.raises(UsageError):
        await store.commit_slice(other)
    assert await valid(core) == []
