"""The state journal: change records commit with the slice; checkpoints are marked
recoverable only once complete; recovery = newest full + increments + replay."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import msgspec
import pytest

from dormant.errors import InvalidInput, LeaseLost, NotFound
from dormant.journal import rules as journal
from dormant.records import StateChange
from dormant.store.backend import Backend
from dormant.store.base import Store
from dormant.store.journal import StateJournal
from tests.helpers import FakeClock

from .support import plan, take, user

WRITES = ("begin_checkpoint", "put_checkpoint_parts", "mark_recoverable")


class Crash(Exception):
    """The injected fault: the process 'dies' at this call."""


class FaultyBackend:
    """A backend proxy whose journal part 'dies' (raises :class:`Crash`) at its ``at``-th
    checkpoint write (a call of :data:`WRITES`): before the call reaches the database,
    or right after it committed when ``after``."""

    def __init__(self, inner: Backend, at: int, *, after: bool) -> None:
        self.inner = inner
        self.at = at
        self.after = after
        self.writes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @property
    def journal(self) -> FaultyJournal:
        """The inner backend's journal part, with the fault."""
        return FaultyJournal(self)


class FaultyJournal:
    """The journal part of a :class:`FaultyBackend`."""

    def __init__(self, owner: FaultyBackend) -> None:
        self.owner = owner

    def __getattr__(self, name: str) -> Any:
        owner = self.owner
        target = getattr(owner.inner.journal, name)
        if name not in WRITES:
            return target

        async def counted(*args: Any) -> Any:
            owner.writes += 1
            if owner.writes == owner.at and not owner.after:
                raise Crash(name)
            answer = await target(*args)
            if owner.writes == owner.at:
                raise Crash(name)
            return answer

        return counted


def sets(**values: object) -> tuple[StateChange, ...]:
    """Changes setting (None: deleting) keys, as ``add`` (the store does not tell them apart)."""
    return tuple(
        StateChange(op="delete", key=k)
        if v is None
        else StateChange(op="add", key=k, value=msgspec.json.encode(v).decode())
        for k, v in values.items()
    )


async def commit(store: Store, thread: str, key: str, changes: Sequence[StateChange], runs: int = 1) -> None:
    """One slice of ``thread`` over a new user input, journaling ``changes``."""
    await store.admit([user(thread, key)])
    c, load = await take(store, thread)
    await store.commit_slice(msgspec.structs.replace(plan(c, load), state=tuple(changes), runs=runs))


def expected(*steps: dict[str, object]) -> dict[str, str]:
    state: dict[str, str] = {}
    for step in steps:
        for k, v in step.items():
            if v is None:
                state.pop(k, None)
            else:
                state[k] = msgspec.json.encode(v).decode()
    return state


async def test_state_changes_commit_with_the_slice_and_replay_to_the_state(store: Store) -> None:
    await commit(store, "t", "k1", sets(order="ORD-1", coupon="WELCOME"))
    await commit(store, "t", "k2", sets(order="ORD-2", coupon=None))
    page = await store.journal.entries("t")
    assert [(e.seq, e.kind, e.key, e.run) for e in page.items] == [
        (1, "add", "order", 1),
        (2, "add", "coupon", 1),
        (3, "add", "order", 2),
        (4, "delete", "coupon", 2),
    ]
    got = await store.journal.recover("t")
    assert got.state == expected({"order": "ORD-2"}) and got.upto == 4 and got.replayed == 4
    first = await store.journal.entries("t", limit=3)
    assert first.next_cursor == "3"
    rest = await store.journal.entries("t", cursor=first.next_cursor)
    assert [e.seq for e in rest.items] == [4] and rest.next_cursor is None


async def test_a_thread_created_with_state_journals_it_in_the_same_transaction(store: Store) -> None:
    made = await store.create_thread("t", "a", state={"_subject": '"k1:abc"', "lang": '"pt"'})
    assert made.id == "t" and made.last_seq == 0
    got = await store.journal.recover("t")
    assert got.state == {"_subject": '"k1:abc"', "lang": '"pt"'}
    assert [(e.kind, e.key) for e in (await store.journal.entries("t")).items] == [
        ("add", "_subject"),
        ("add", "lang"),
    ]
    # an existing thread is returned as it is: its state is not written again
    await store.create_thread("t", "a", state={"_subject": '"k1:other"'})
    assert (await store.journal.recover("t")).state == got.state
    with pytest.raises(InvalidInput):
        await store.create_thread("u", "a", state={"k": "{not json"})
    with pytest.raises(NotFound):
        await store.get_thread("u")  # refused before anything was written


async def test_a_failed_commit_journals_nothing_and_bad_changes_are_refused(store: Store) -> None:
    await store.admit([user("t", "k1")])
    c, load = await take(store, "t")
    stale = msgspec.structs.replace(plan(c, load), token="not-the-lease", state=sets(a=1))
    with pytest.raises(LeaseLost):
        await store.commit_slice(stale)
    for bad in (
        (StateChange(op="add", key="k", value="{not json"),),
        (StateChange(op="update", key="", value="1"),),
        (StateChange(op="delete", key="k", value="1"),),
        (StateChange(op="add", key="k"),),
    ):
        with pytest.raises(InvalidInput):
            await store.commit_slice(msgspec.structs.replace(plan(c, load), state=bad))
    assert (await store.journal.entries("t")).items == ()
    await store.commit_slice(msgspec.structs.replace(plan(c, load), state=sets(a=1)))
    assert (await store.journal.recover("t")).state == expected({"a": 1})
    with pytest.raises(NotFound):
        await store.journal.recover("missing")


async def test_recovery_uses_the_newest_full_checkpoint_and_the_increments_after_it(store: Store) -> None:
    await commit(store, "t", "k1", sets(a=1, b=2))
    full = await store.journal.checkpoint("t", "full", part_chars=4)
    assert full is not None and full.recoverable and full.upto == 2 and full.parts > 1
    await commit(store, "t", "k2", sets(a=10, c=3))
    incr = await store.journal.checkpoint("t", "incremental")
    assert incr is not None and incr.kind == "incremental" and incr.upto == full.seq + 2
    assert await store.journal.checkpoint("t", "incremental") is None, "nothing changed since"
    await commit(store, "t", "k3", sets(b=None))
    got = await store.journal.recover("t")
    assert got.state == expected({"a": 1, "b": 2}, {"a": 10, "c": 3}, {"b": None})
    assert got.full is not None and got.full.seq == full.seq
    assert got.increments == 1 and got.replayed == 1, "only the change after the increment is replayed"


async def test_a_crash_at_any_point_of_a_checkpoint_write_leaves_the_last_one_usable(store: Store) -> None:
    await commit(store, "t", "k1", sets(a=1, b="x" * 40))
    assert await store.journal.checkpoint("t", "full", part_chars=4) is not None
    await commit(store, "t", "k2", sets(a=2, c=[1, 2]))
    want = expected({"a": 1, "b": "x" * 40}, {"a": 2, "c": [1, 2]})
    crashed: list[tuple[str, bool]] = []
    for after in (False, True):
        for at in range(1, 100):
            before = await store.journal.backend.journal.newest_checkpoint("t", "full")
            assert before is not None
            faulty = FaultyBackend(store.journal.backend, at, after=after)
            try:
                await StateJournal(cast(Backend, faulty)).checkpoint("t", "full", part_chars=4)
            except Crash as exc:
                crashed.append((str(exc), after))
            else:
                break  # the write finished before crash point ``at``: every point was tried
            got = await store.journal.recover("t")
            assert got.full is not None and got.state == want, f"crash at write {at} ({after=})"
            if crashed[-1] == ("mark_recoverable", True):  # it died once the mark was durable
                assert got.full.seq > before.seq
            else:
                assert got.full.seq == before.seq, f"crash at write {at} ({after=})"
            # the headers left unfinished never count
            heads = await store.journal.backend.journal.checkpoints_after("t", 0, 100)
            assert all(h.recoverable and h.parts for h in heads)
    # begin, 2 part batches (19 pieces of 4 characters, 16 per batch), mark: before and after each
    writes = ["begin_checkpoint", "put_checkpoint_parts", "put_checkpoint_parts", "mark_recoverable"]
    assert crashed == [(w, False) for w in writes] + [(w, True) for w in writes]


async def test_a_due_checkpoint_follows_the_run_and_time_policy(store: Store, clock: FakeClock) -> None:
    policy = journal.CheckpointPolicy(incremental_runs=2, full_runs=4, incremental_s=600, full_s=3600)
    await commit(store, "t", "k1", sets(a=1))
    first = await store.journal.maybe_checkpoint("t", policy, clock.now)
    assert first is not None and first.kind == "full", "no full checkpoint yet"
    await commit(store, "t", "k2", sets(a=2))
    assert await store.journal.maybe_checkpoint("t", policy, clock.now) is None, "1 run < 2"
    await commit(store, "t", "k3", sets(a=3))
    second = await store.journal.maybe_checkpoint("t", policy, clock.now)
    assert second is not None and second.kind == "incremental"
    await commit(store, "t", "k4", sets(a=4), runs=2)
    third = await store.journal.maybe_checkpoint("t", policy, clock.now)
    assert third is not None and third.kind == "full", "4 runs since the full one"
    await commit(store, "t", "k5", sets(a=5), runs=0)
    assert await store.journal.maybe_checkpoint("t", policy, clock.now) is None
    clock.now += 601
    fourth = await store.journal.maybe_checkpoint("t", policy, clock.now)
    assert fourth is not None and fourth.kind == "incremental", "15 minutes passed"
    figures = await store.journal.figures("t", clock.now + 5)
    assert figures.last_checkpoint_age_s == pytest.approx(5)
    assert figures.full_bytes == third.size and figures.increment_bytes == fourth.size
    assert figures.recovery_s > 0 and figures.pending_changes == 0


async def test_deleting_a_thread_deletes_its_journal(store: Store) -> None:
    await commit(store, "t", "k1", sets(a=1))
    await store.journal.checkpoint("t", "full")
    await store.delete_thread("t")
    await commit(store, "t", "k1", ())
    got = await store.journal.recover("t")
    assert got.state == {} and got.full is None
