"""The governor's pure state machine: levels, hysteresis, the adaptive soft limit."""

from __future__ import annotations

from typing import Any

import pytest

from dormant.governor.levels import MAX_HISTORY, MIB, GovernorState, Level, Policy

HARD = 1000 * MIB


def state(**kw: Any) -> GovernorState:
    return GovernorState(Policy(hard_limit=HARD, **kw))


def level(s: GovernorState) -> Level:
    """The level (through a call, so mypy does not narrow it across observations)."""
    return s.level


def mib(n: float) -> int:
    return int(n * MIB)


def test_levels_rise_at_their_shares_of_the_soft_limit() -> None:
    s = state()
    assert s.observe(0, mib(100)) == []
    assert level(s) is Level.OK
    s.observe(1, mib(600))
    assert level(s) is Level.WARN
    s.observe(2, mib(750))
    assert level(s) is Level.INTERVENE
    s.observe(3, mib(900))
    assert level(s) is Level.EMERGENCY
    (t,) = s.observe(4, mib(1000))
    assert level(s) is Level.HARD
    assert (t.event, t.before, t.after, t.hard_limit) == ("memory_level", Level.EMERGENCY, Level.HARD, HARD)


def test_a_jump_goes_straight_to_the_highest_level_reached() -> None:
    s = state()
    (t,) = s.observe(0, mib(950))
    assert (t.before, t.after) == (Level.OK, Level.EMERGENCY)
    assert s.transitions[Level.EMERGENCY] == 1 and s.transitions[Level.WARN] == 0


def test_hysteresis_keeps_a_level_until_rss_is_clear_of_it() -> None:
    s = state(hysteresis=0.05)
    s.observe(0, mib(760))
    assert level(s) is Level.INTERVENE
    # just below 75 %: still intervening (no flapping)
    for t in range(1, 20):
        s.observe(t, mib(749 if t % 2 else 752))
    assert level(s) is Level.INTERVENE
    assert s.transitions[Level.INTERVENE] == 1
    s.observe(30, mib(699))  # 75 % - 5 % = 700: clear
    assert level(s) is Level.WARN
    s.observe(31, mib(100))
    assert level(s) is Level.OK


def test_falling_far_steps_down_through_every_cleared_level() -> None:
    s = state()
    s.observe(0, mib(1200))
    assert level(s) is Level.HARD
    s.observe(1, mib(980))  # under the hard limit but within the band: still read-only
    assert level(s) is Level.HARD
    s.observe(2, mib(880))  # clear of hard (950) and emergency's band (900 - 50): EMERGENCY still
    assert level(s) is Level.EMERGENCY
    (t,) = s.observe(3, mib(10))
    assert (t.before, t.after) == (Level.EMERGENCY, Level.OK)


def test_fast_growth_lowers_the_soft_limit_and_stable_memory_restores_it() -> None:
    s = state(growth_window_s=600, soft_adjust_s=120, growth_bytes_per_min=50 * MIB)
    # 100 MB a minute for 2 minutes: over 50 MB/min
    events = []
    for second in range(0, 121, 5):
        events += s.observe(second, mib(100 + second * 100 / 60))
    soft = [e for e in events if e.event == "memory_soft_limit"]
    assert len(soft) == 1
    assert s.soft_share == pytest.approx(0.9)
    assert s.soft_limit == int(HARD * 0.9)
    assert s.threshold(Level.WARN) == int(HARD * 0.9 * 0.6)
    # RSS 300 MB then flat: the window still shows growth, until the flat part dominates
    for second in range(125, 2000, 5):
        s.observe(second, mib(300))
    assert s.soft_share == pytest.approx(1.0)
    assert s.soft_changes >= 2


def test_the_soft_limit_never_drops_below_its_floor() -> None:
    s = state(soft_adjust_s=0, growth_window_s=60, soft_min=0.7)
    for second in range(0, 600):
        s.observe(second, mib(second * 2))  # 120 MB/min for ten minutes
    assert s.soft_share == pytest.approx(0.7)


def test_the_growth_history_is_bounded() -> None:
    s = state(growth_window_s=10)
    for i in range(100_000):
        s.observe(i * 0.001, mib(1))
    assert len(s._history) <= MAX_HISTORY


def test_growth_is_zero_until_a_tenth_of_the_window_is_seen() -> None:
    s = state(growth_window_s=600)
    s.observe(0, 0)
    s.observe(30, mib(500))
    assert s.growth() == 0.0
    s.observe(60, mib(500))
    assert s.growth() == pytest.approx(500 * MIB)


@pytest.mark.parametrize(
    "kw",
    [
        {"warn": 0.8, "intervene": 0.75},
        {"emergency": 1.2},
        {"hysteresis": 0.7},
        {"soft_min": 0.0},
        {"growth_window_s": 0},
    ],
)
def test_an_inconsistent_policy_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Policy(hard_limit=HARD, **kw)
