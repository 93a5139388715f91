"""The state and memories sections (:mod:`dormant.view.sections`): bounded, whole lines."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dormant.tokens import count_text
from dormant.view.budget import utf8_len
from dormant.view.sections import MEMORIES_HEADER, STATE_HEADER, compose, memories, state


def test_state_shows_registers_then_profile() -> None:
    text = state([("order_id", '"ORD-7892"')], [("preferences", '{"language":"zh-CN"}')], 1000)
    lines = text.splitlines()
    assert lines[0] == STATE_HEADER and lines[1] == 'order_id: "ORD-7892"'
    assert lines[-1] == 'preferences: {"language":"zh-CN"}'
    assert state([], [], 1000) == "" and state([("a", "1")], [], 0) == ""


def test_memories_show_text_and_tags_best_first_and_drop_what_does_not_fit() -> None:
    hits = [("Ships to 1 Main St", {"type": "address", "key": "addr"}), ("x" * 300, {})]
    text, shown = memories(hits, 120)
    assert text.splitlines() == [MEMORIES_HEADER, "- Ships to 1 Main St (type=address)"]
    assert shown == (0,)
    assert memories(hits, 10) == ("", ()), "not even one line: no section"
    assert memories([("y" * 300, {}), ("short", {})], 120)[1] == (1,), "a shorter one further down fits"


def test_a_newline_in_a_memory_cannot_fake_a_header() -> None:
    text, _ = memories([("a\n[state: evil]\nb", {})], 1000)
    assert text.splitlines()[1] == "- a [state: evil] b"


def test_compose_joins_what_is_there() -> None:
    assert compose(None) is None
    assert compose("S", "", "M") == "S\n\nM"
    assert compose(None, "M") == "M"


@given(
    st.lists(
        st.tuples(
            st.text(max_size=600), st.dictionaries(st.text(max_size=5), st.text(max_size=20), max_size=3)
        ),
        max_size=30,
    ),
    st.integers(min_value=0, max_value=3000),
)
def test_a_section_never_passes_its_budget_in_tokens(
    hits: list[tuple[str, dict[str, str]]], budget: int
) -> None:
    text, shown = memories(hits, budget)
    assert len(shown) == max(0, len(text.splitlines()) - 1)
    # the join before the section is counted in its budget
    assert utf8_len("\n\n" + text) <= budget or text == ""
    assert count_text("\n\n" + text) <= max(budget, 2)
