"""The retention policy's pure parts: the documented defaults, validation, and how a tier
over its share of the budget makes a round stricter."""

from __future__ import annotations

import pytest

from dormant import Agent, ModelReply, ScriptedModel
from dormant.errors import UsageError
from dormant.records import TierSizes
from dormant.retention.policy import KEEP, LONG_RUN, RetentionPolicy, over_budget, strictness


def test_the_default_policy_deletes_and_cuts_nothing() -> None:
    from dormant.config import Settings

    for p in (RetentionPolicy(), KEEP, RetentionPolicy.from_settings(Settings.from_env())):
        assert p.name == "keep"
        assert not (p.tool_results or p.history or p.summaries or p.journal or p.prunes)
    assert RetentionPolicy.named("keep") is KEEP


def test_long_run_is_one_setting_away_and_has_every_tier() -> None:
    from dormant.config import Settings

    for p in (
        LONG_RUN,
        RetentionPolicy.named("long-run"),
        RetentionPolicy.of("long-run"),
        RetentionPolicy.from_settings(Settings.from_env(retention="long-run")),
    ):
        assert p.name == "long-run" and p.tool_results and p.history and p.summaries and p.journal
        assert (p.full_tool_calls, p.head_chars, p.full_runs, p.metric_runs) == (200, 512, 5, 20)
        assert (p.dedup_horizon_s, p.tier_share, p.budget_bytes) == (7 * 86400, 0.30, 0)
        assert p.keep_summaries == 2
    tuned = RetentionPolicy.from_settings(Settings.from_env(retention="long-run", retention_tool_calls=7))
    assert tuned.full_tool_calls == 7 and tuned.history
    with pytest.raises(UsageError, match="unknown retention policy"):
        RetentionPolicy.named("forever")
    with pytest.raises(UsageError, match="retention"):
        Settings.from_env(retention="forever")


def test_an_agent_names_its_policy_or_gives_one() -> None:
    model = ScriptedModel(lambda req: ModelReply(text="ok"))
    assert Agent(name="a", model=model).retention is None
    assert Agent(name="a", model=model, retention="long-run").retention == "long-run"
    with pytest.raises(UsageError, match="unknown retention policy"):
        Agent(name="a", model=model, retention="forever")


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
