"""Admission rules: validation, size limit, ordering key and consumability."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dormant import inbox
from dormant.errors import InvalidInput
from dormant.records import NewInput, Priority


def item(**overrides: Any) -> NewInput:
    values: dict[str, Any] = {"thread_id": "t1", "kind": "user", "dedup_key": "k1", "content": "hi"}
    values.update(overrides)
    return NewInput(**values)


def test_valid_inputs_pass() -> None:
    inbox.validate([item(), item(kind="tool_result", call_id="c1"), item(priority=Priority.P0)])
    inbox.validate([])


def test_size_limit_is_in_utf8_bytes_and_inclusive() -> None:
    inbox.validate([item(content="x" * 100)], max_input_bytes=100)
    with pytest.raises(InvalidInput, match="exceeds the limit of 100 bytes"):
        inbox.validate([item(content="x" * 101)], max_input_bytes=100)
    with pytest.raises(InvalidInput):
        inbox.validate([item(content="é" * 51)], max_input_bytes=100)  # 102 bytes, 51 characters


def test_default_size_limit_is_one_mebibyte() -> None:
    inbox.validate([item(content="x" * inbox.DEFAULT_MAX_INPUT_BYTES)])
    with pytest.raises(InvalidInput):
        inbox.validate([item(content="x" * (inbox.DEFAULT_MAX_INPUT_BYTES + 1))])


def test_one_bad_item_refuses_the_batch() -> None:
    with pytest.raises(InvalidInput):
        inbox.validate([item(), item(content="x" * 11)], max_input_bytes=10)


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"thread_id": ""}, "thread id"),
        ({"thread_id": "t" * (inbox.MAX_THREAD_ID_BYTES + 1)}, "thread id"),
        ({"dedup_key": ""}, "dedup key"),
        ({"dedup_key": "k" * (inbox.MAX_DEDUP_KEY_BYTES + 1)}, "dedup key"),
        ({"kind": "gossip"}, "unknown input kind"),
        ({"priority": 7}, "priority"),
        ({"kind": "tool_result"}, "call_id"),
    ],
)
def test_malformed_inputs_are_refused(overrides: dict[str, Any], needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        inbox.validate([item(**overrides)])


def test_longest_allowed_ids_pass() -> None:
    inbox.validate(
        [item(thread_id="t" * inbox.MAX_THREAD_ID_BYTES, dedup_key="k" * inbox.MAX_DEDUP_KEY_BYTES)]
    )


def test_priority_classes_order_inputs_admitted_together() -> None:
    now = 1000.0
    keys = [inbox.sort_key(item(priority=p), now) for p in (Priority.P0, Priority.P1, Priority.P2)]
    assert keys[0] < keys[1] < keys[2]


def test_aging_lets_an_old_bulk_input_beat_newer_urgent_ones() -> None:
    old_bulk = inbox.sort_key(item(priority=Priority.P2), 0.0)
    later_normal = inbox.sort_key(
        item(priority=Priority.P1), inbox.AGING[Priority.P2] - inbox.AGING[Priority.P1] + 1
    )
    later_urgent = inbox.sort_key(item(priority=Priority.P0), inbox.AGING[Priority.P2] + 1)
    assert old_bulk < later_normal
    assert old_bulk < later_urgent


@given(
    a=st.floats(min_value=0, max_value=1e9),
    wait=st.floats(min_value=0.001, max_value=1e6),
    p=st.sampled_from(list(Priority)),
    q=st.sampled_from(list(Priority)),
)
def test_no_class_waits_longer_than_its_aging_offset(a: float, wait: float, p: Priority, q: Priority) -> None:
    """An input that has waited its class's aging offset runs before anything admitted later."""
    first = inbox.sort_key(item(priority=p), a)
    later = inbox.sort_key(item(priority=q), a + inbox.AGING[p] + wait)
    assert first < later


def test_sort_key_of_a_timer_counts_from_when_it_may_run() -> None:
    assert inbox.sort_key(item(not_before=500.0, priority=Priority.P0), 100.0) == 500.0
    assert (
        inbox.sort_key(item(not_before=50.0, priority=Priority.P1), 100.0) == 100.0 + inbox.AGING[Priority.P1]
    )


def test_only_tool_results_are_consumable_while_calls_are_open() -> None:
    assert inbox.consumable("user", 0)
    assert inbox.consumable("tool_result", 0)
    assert inbox.consumable("tool_result", 2)
    for kind in ("user", "timer", "event", "report"):
        assert not inbox.consumable(kind, 1)
