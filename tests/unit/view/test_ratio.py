"""The learned token ratio: conservative, bounded, applied by the budget, kept per thread."""

from __future__ import annotations

import pytest

from dormant.errors import UsageError
from dormant.models.base import ModelRequest
from dormant.records import Message
from dormant.tokens import TokenCounter
from dormant.view import budget, ratio


def test_a_ratio_rises_at_once_and_falls_slowly_within_bounds() -> None:
    up = ratio.learned(1.0, 2.6)
    assert up == pytest.approx(2.6 * ratio.HEADROOM)
    down = ratio.learned(up, 1.0)
    assert 1.0 < down < up and down > up - 0.2, "one low sample barely lowers it"
    assert ratio.learned(1.0, 0.5) == 1.0, "never below 1"
    assert ratio.learned(1.0, 100.0) == ratio.MAX_RATIO
    assert ratio.learned(2.0, float("nan")) == 2.0


def test_quantize_rounds_up_to_a_step() -> None:
    assert ratio.quantize(1.0) == 1.0
    assert ratio.quantize(0.3) == 1.0
    assert ratio.quantize(1.01) == pytest.approx(1.05)
    assert ratio.quantize(2.6) == pytest.approx(2.6)
    assert ratio.quantize(2.61) == pytest.approx(2.65)
    assert ratio.quantize(50) == ratio.MAX_RATIO


def test_the_size_a_refusal_names_is_read() -> None:
    llama = (
        "HTTP 400: request (3224 tokens) exceeds the available context size (2048 tokens), try increasing it"
    )
    assert ratio.overflow_tokens(llama) == 3224
    assert ratio.overflow_tokens("However, your prompt contains 9000 tokens. Please reduce") == 9000
    assert ratio.overflow_tokens("the prompt is too long") is None


def test_ratios_per_model_are_bounded_and_learn_only_from_long_prompts() -> None:
    ratios = ratio.TokenRatios(max_models=3)
    assert ratios.observe("m", real=50, estimated=20) == 1.0, "a short prompt is mostly framing"
    assert ratios.observe("m", real=2600, estimated=1000) == pytest.approx(2.6 * ratio.HEADROOM)
    assert ratios.get("other") == 1.0
    for name in ("a", "b", "c", "d"):
        ratios.observe(name, real=2000, estimated=1000)
    assert len(ratios) == 3 and ratios.get("m") == 1.0, "the oldest model was dropped"
    assert ratios.raise_to("a", 5.0) == 5.0 and ratios.raise_to("a", 2.0) == 5.0


def test_a_thread_keeps_its_ratio_for_its_model_only() -> None:
    state = {ratio.STATE_KEY: ratio.state_value("smol", 2.61)}
    assert ratio.stored_ratio(state, "smol") == pytest.approx(2.61)
    assert ratio.stored_ratio(state, "other") == 1.0
    assert ratio.stored_ratio({ratio.STATE_KEY: "not json"}, "smol") == 1.0
    assert ratio.stored_ratio(None, "smol") == 1.0


def test_the_budget_divides_the_prompt_by_the_ratio() -> None:
    plain = budget.view_limits(window=2048, max_output=256, system="be brief", max_bytes=1 << 20)
    scaled = budget.view_limits(window=2048, max_output=256, system="be brief", max_bytes=1 << 20, ratio=2.5)
    prompt = budget.prompt_tokens(2048, 256, 0.02)
    fixed = prompt - plain.max_tokens
    assert scaled.max_tokens == int(prompt / 2.5) - fixed
    # the byte proof holds: a view of at most max_tokens bytes fits whatever the tokenizer
    assert scaled.counts_tokens
    with pytest.raises(UsageError, match="at least 1"):
        budget.view_limits(window=2048, max_output=256, system="", ratio=0.5)
    with pytest.raises(UsageError, match=r"2x dormant's count"):
        budget.view_limits(window=1024, max_output=256, system="", ratio=2.0)


def test_the_estimate_counts_every_part_of_a_request() -> None:
    counter = TokenCounter("o200k_base")
    messages = (
        Message(seq=1, role="user", content="Привет, как дела?"),
        Message(seq=2, role="assistant", content="Хорошо", tokens=50),  # a stored count is used
    )
    request = ModelRequest(thread_id="t", system="sys", messages=messages, summary="older")
    plain = ratio.estimate(request, counter)
    assert plain == 3 + counter.count("system", "sysolder") + counter.message(messages[0]) + 50
    with_tools = ModelRequest(
        thread_id="t", system="sys", messages=messages, summary="older", tools=({"type": "function"},)
    )
    assert ratio.estimate(with_tools, counter) > plain
