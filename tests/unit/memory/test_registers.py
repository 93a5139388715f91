"""State registers (:mod:`dormant.memory.registers`): the short-term register as journal changes."""

from __future__ import annotations

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from dormant.journal import rules as journal
from dormant.memory.registers import SUBJECT_KEY, TURN_KEY, finish, read, subject_of
from dormant.records import Input, Priority, StateChange

KEY = "b1_" + "a" * 64


def set_(key: str, value: object) -> StateChange:
    return StateChange(op="update", key=key, value=msgspec.json.encode(value).decode())


def user(source: str | None, n: int = 1) -> Input:
    return Input(
        id=n,
        thread_id="t",
        kind="user",
        dedup_key=f"k{n}",
        content="hi",
        priority=Priority.P1,
        not_before=0,
        admitted_at=0,
        source=source,
    )


def slice_(
    state: dict[str, str], changes: list[StateChange], turns: int = 1, subject: str | None = KEY
) -> list[tuple[str, str | None]]:
    out, writes = finish(read(state), changes, subject=subject, user_turns=turns, tsr_turns=3)
    for change in out:
        journal.apply(state, change)
    return list(writes)


def test_a_register_entry_lives_three_turns_then_its_delete_is_journaled() -> None:
    state: dict[str, str] = {}
    writes = slice_(state, [set_("order_id", "ORD-7892")])
    assert writes == [("order_id", '"ORD-7892"')]
    regs = read(state)
    assert regs.subject == KEY and regs.turn == 1 and regs.entries == (("order_id", '"ORD-7892"'),)
    slice_(state, [set_("coupon", "WELCOME")])
    slice_(state, [])
    assert [k for k, _ in read(state).entries] == ["coupon", "order_id"], "newest turn first"
    slice_(state, [])
    assert [k for k, _ in read(state).entries] == ["coupon"], "order_id was set 3 turns ago"
    assert read(state).turn == 4


def test_a_slice_without_user_input_keeps_the_turn() -> None:
    state: dict[str, str] = {}
    slice_(state, [set_("a", 1)])
    out, _ = finish(read(state), [], subject=KEY, user_turns=0, tsr_turns=3)
    assert out == (), "nothing changed: nothing journaled"


def test_a_tool_cannot_touch_the_bookkeeping_and_deletes_are_writes() -> None:
    state: dict[str, str] = {}
    slice_(state, [set_(TURN_KEY, 99), set_(SUBJECT_KEY, "b1_evil")])
    regs = read(state)
    assert regs.turn == 1 and regs.subject == KEY
    assert dict(regs.entries) == {TURN_KEY: "99", SUBJECT_KEY: '"b1_evil"'}
    writes = slice_(state, [StateChange(op="delete", key=TURN_KEY)])
    assert writes == [(TURN_KEY, None)] and TURN_KEY not in dict(read(state).entries)


def test_the_subject_comes_from_the_newest_identified_user_input() -> None:
    other = "b1_" + "b" * 64
    assert subject_of([user(KEY, 1), user(other, 2)], None) == other
    assert subject_of([user(None, 1)], KEY) == KEY
    assert subject_of([user("thread-x", 1)], None) is None, "not a binding key"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),
            st.lists(
                st.tuples(st.sampled_from("abcde"), st.one_of(st.none(), st.integers(0, 9))), max_size=4
            ),
        ),
        max_size=12,
    )
)
def test_the_register_is_the_replay_of_its_journal(
    slices: list[tuple[int, list[tuple[str, int | None]]]],
) -> None:
    """Whatever the changes, the register read from the state equals a model of the
    last three turns' sets, and replaying the journal changes gives that state."""
    state: dict[str, str] = {}
    log: list[StateChange] = []
    model: dict[str, tuple[int, int]] = {}
    turn = 0
    for turns, sets in slices:
        changes = [StateChange(op="delete", key=k) if v is None else set_(k, v) for k, v in sets]
        out, _ = finish(read(state), changes, subject=KEY, user_turns=turns, tsr_turns=3)
        for change in out:
            journal.apply(state, change)
        log.extend(out)
        turn += turns
        for key, value in sets:
            if value is None:
                model.pop(key, None)
            else:
                model[key] = (value, turn)
        model = {k: v for k, v in model.items() if v[1] > turn - 3}
        replayed: dict[str, str] = {}
        for change in log:
            journal.apply(replayed, change)
        assert replayed == state
        assert {k: int(v) for k, v in read(state).entries} == {k: v for k, (v, _) in model.items()}
