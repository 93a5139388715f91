"""The retention policy's pure parts: the documented defaults, validation, and how a tier
over its share of the budget makes a round stricter."""

from __future__ import annotations

import pytest

from dormant.records import TierSizes
from dormant.retention.policy import RetentionPolicy, over_budget, strictness


def test_defaults_are_the_issue_s() -> None:
    p = RetentionPolicy()
    assert (p.full_tool_calls, p.head_chars, p.full_runs, p.metric_runs) == (200, 512, 5, 20)
    assert (p.dedup_horizon_s, p.tier_share, p.budget_bytes) == (7 * 86400, 0.30, 0)
    assert p.keep_summaries == 2


def test_the_settings_name_how_many_summaries_stay() -> None:
    from dormant.config import Settings

    assert RetentionPolicy.from_settings(Settings.from_env(retention_summaries=5)).keep_summaries == 5


@pytest.mark.parametrize(
    "bad",
    [
        {"full_tool_calls": 0},
        {"full_runs": 0},
        {"keep_summaries": 0},
        {"metric_runs": -1},
        {"dedup_horizon_s": 0},
        {"tier_share": 1.5},
    ],
)
def test_bad_policies_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetentionPolicy(**bad)  # type: ignore[arg-type]


def test_without_a_budget_the_policy_applies_as_is() -> None:
    p = RetentionPolicy()
    huge = TierSizes(tool_full=10**12, history=10**12, journal=10**12)
    s = strictness(p, huge)
    assert (s.keep_tool_calls, s.history_runs, s.full_runs, s.metric_runs) == (200, 25, 5, 20)
    assert over_budget(p, huge) == []


def test_a_tier_over_its_share_keeps_proportionally_less() -> None:
    p = RetentionPolicy(budget_bytes=1000, tier_share=0.3)  # 300 bytes a tier
    sizes = TierSizes(tool_full=600, tool_excerpt=100, history=150, journal=1200, blobs=0, dedup_keys=50)
    assert over_budget(p, sizes) == ["tool_full", "journal"]
    s = strictness(p, sizes)
    assert s.keep_tool_calls == 100, "twice its share: half the whole results"
    assert s.history_runs == 25, "history within its share"
    assert (s.full_runs, s.metric_runs) == (5, 1), "journal four times over: 25 runs -> 6"
    worst = strictness(p, TierSizes(blobs=10**9, history=10**9, journal=10**9))
    assert (worst.keep_tool_calls, worst.history_runs, worst.full_runs, worst.metric_runs) == (1, 1, 1, 0)
