"""Property: whatever crashes (a checkpoint write dying at any step, before or after
its transaction, slices losing their lease), the recovered state equals the replay of
the committed journal, and the store is reopened (SQLite file) to recover it. The thread
row's state column equals that replay whenever it is carried, and is carried exactly
when the last slice that changed the journal gave it."""

from __future__ import annotations

import asyncio
import tempfile
from typing import cast

import apsw
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dormant.errors import LeaseLost
from dormant.records import StateChange
from dormant.store.backend import Backend
from dormant.store.journal import StateJournal
from dormant.store.rows import row_state, state_row
from dormant.store.sqlite import SQLiteStore
from tests.contract.support import plan, take, user
from tests.contract.test_journal import Crash, FaultyBackend
from tests.helpers import FakeClock

KEYS = st.sampled_from(["a", "b", "c", "d"])
VALUES = st.one_of(st.none(), st.integers(-5, 5), st.text(max_size=30))
CHANGES = st.lists(st.tuples(KEYS, VALUES), min_size=0, max_size=4)
#: a slice (its changes, whether its lease is lost) or a checkpoint (kind, crash point, after?)
STEPS = st.lists(
    st.one_of(
        # a slice: its changes, whether its lease is lost, whether it gives the state for the row
        st.tuples(st.just("slice"), CHANGES, st.booleans(), st.booleans()),
        st.tuples(
            st.just("checkpoint"),
            st.sampled_from(["full", "incremental"]),
            st.integers(0, 6),
            st.booleans(),
        ),
    ),
    min_size=1,
    max_size=12,
)


def as_changes(pairs: list[tuple[str, object]]) -> tuple[StateChange, ...]:
    return tuple(
        StateChange(op="delete", key=k)
        if v is None
        else StateChange(op="update", key=k, value=msgspec.json.encode(v).decode())
        for k, v in pairs
    )


def row_state_of(path: str, thread_id: str) -> dict[str, str] | None:
    """The thread row's state column, read from the file on a connection of its own."""
    conn = apsw.Connection(path)
    try:
        rows = conn.execute("SELECT state FROM threads WHERE id = ?", (thread_id,)).fetchall()
    finally:
        conn.close()
    return row_state(cast(str | None, rows[0][0]))


async def scenario(steps: list[tuple[object, ...]], path: str) -> None:
    clock = FakeClock()
    model: dict[str, str] = {}
    known = True  # whether the thread row carries the state (a new thread's: {})
    store = SQLiteStore(f"sqlite:///{path}", clock=clock)
    await store.open()
    await store.create_thread("t", "a")
    try:
        for n, step in enumerate(steps):
            if step[0] == "slice":
                pairs, lost, gives = cast(list[tuple[str, object]], step[1]), bool(step[2]), bool(step[3])
                await store.admit([user("t", f"k{n}")])
                c, load = await take(store, "t")
                assert load.state is None or load.state == model, "the row is never a wrong state"
                token = "stolen" if lost else c.token
                changes = as_changes(pairs)
                after = dict(model)
                for change in changes:
                    if change.value is None:
                        after.pop(change.key, None)
                    else:
                        after[change.key] = change.value
                state_json = state_row(after)[0] if gives else None
                try:
                    await store.commit_slice(
                        msgspec.structs.replace(
                            plan(c, load), token=token, state=changes, runs=1, state_json=state_json
                        )
                    )
                except LeaseLost:
                    assert lost
                    await store.release(c)
                    continue
                model = after
                if gives:
                    known = True
                elif changes:
                    known = False
            else:
                kind, at, late = str(step[1]), int(cast(int, step[2])), bool(step[3])
                faulty = FaultyBackend(store.journal.backend, at, after=late)
                try:
                    await StateJournal(cast(Backend, faulty)).checkpoint("t", kind, part_chars=8)
                except Crash:
                    # the process died: reopen the store from its file, as a restart would
                    await store.close()
                    store = SQLiteStore(f"sqlite:///{path}", clock=clock)
                    await store.open()
            assert (await store.journal.recover("t")).state == model
            row = row_state_of(path, "t")
            assert (row is not None) == known and (row is None or row == model), (row, model)
    finally:
        await store.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=STEPS)
def test_after_any_crash_point_the_state_is_the_replay_of_the_committed_journal(
    steps: list[tuple[object, ...]],
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(scenario(steps, f"{tmp}/j.db"))
