"""The benchmarks' arithmetic: percentiles, slopes, ratios, the RSS formula check."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dormant.bench.stats import (
    flatness_turns,
    formula_check,
    linear_fit,
    per_turn_p50,
    percentile,
    percentiles,
    ratio,
    slope_per_unit,
    turn_ratio,
)

floats = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)


def test_percentile_known_values() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == pytest.approx(50.5)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 100.0
    assert percentile(values, 99) == pytest.approx(99.01)
    assert percentiles([3.0, 1.0, 2.0]) == {"p50": 2.0, "p95": pytest.approx(2.9), "p99": pytest.approx(2.98)}
    assert percentile([], 50) == 0.0
    with pytest.raises(ValueError, match=r"within 0\.\.100"):
        percentile([1.0], 101)


@given(st.lists(floats, min_size=1, max_size=50), st.floats(min_value=0, max_value=100))
def test_percentile_matches_numpy(values: list[float], p: float) -> None:
    assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)), rel=1e-9, abs=1e-6)


def test_linear_fit_exact_line_and_degenerate_cases() -> None:
    slope, _ = linear_fit([(1000, 50e6 + 2048 * 1000), (2000, 50e6 + 2048 * 2000), (3000, 5.6e7 + 144e3)])
    assert slope == pytest.approx(2048 + 72, rel=0.05)
    pts = [(float(x), 3.0 * x + 7.0) for x in range(10)]
    fit = linear_fit(pts)
    assert fit[0] == pytest.approx(3.0) and fit[1] == pytest.approx(7.0)
    assert linear_fit([(5.0, 2.0), (5.0, 4.0)]) == (0.0, 3.0)
    assert linear_fit([]) == (0.0, 0.0)
    # KiB per session: 2 KiB more RSS per session
    assert slope_per_unit([(1000, 1000 * 2048), (10_000, 10_000 * 2048)]) == pytest.approx(2.0)
    with pytest.raises(ValueError):
        slope_per_unit(pts, scale=0)


@given(st.lists(st.tuples(floats, floats), min_size=3, max_size=30))
def test_linear_fit_matches_numpy(points: list[tuple[float, float]]) -> None:
    xs = [x for x, _ in points]
    if max(xs) - min(xs) < 1e-3:
        return
    slope, intercept = linear_fit(points)
    want_slope, want_intercept = np.polyfit(xs, [y for _, y in points], 1)
    assert slope == pytest.approx(want_slope, rel=1e-6, abs=1e-6)
    assert intercept == pytest.approx(want_intercept, rel=1e-6, abs=1e-3)


def test_ratio_direction_and_zeros() -> None:
    assert ratio(2500.0, 50.0) == 50.0  # turns/s: ours over theirs
    assert ratio(100e6, 400e6, higher_is_better=False) == 4.0  # RSS: theirs over ours
    assert ratio(0.0, 10.0) is None
    assert ratio(10.0, 0.0, higher_is_better=False) is None


def test_formula_check() -> None:
    mib = 1 << 20
    ok = formula_check(
        70 * mib, base=40 * mib, per_slice=64 * 1024, in_flight=256, cache_budget=24 * mib, embedder=0
    )
    assert ok.predicted == 80 * mib
    assert ok.ratio == pytest.approx(0.875)
    assert ok.holds
    over = formula_check(120 * mib, base=40 * mib, per_slice=64 * 1024, in_flight=256, cache_budget=24 * mib)
    assert not over.holds
    # the embedder is a term of its own: without it the same RSS does not fit
    with_emb = formula_check(
        150 * mib, base=40 * mib, per_slice=0, in_flight=0, cache_budget=24 * mib, embedder=90 * mib
    )
    assert with_emb.holds
    below_base = formula_check(10 * mib, base=40 * mib, per_slice=0, in_flight=0, cache_budget=24 * mib)
    assert not below_base.holds
    assert math.isinf(formula_check(1.0, base=0, per_slice=0, in_flight=0, cache_budget=0).ratio)
    with pytest.raises(ValueError, match="negative"):
        formula_check(1.0, base=-1, per_slice=0, in_flight=0, cache_budget=0)
    with pytest.raises(ValueError, match="tolerance"):
        formula_check(1.0, base=1, per_slice=0, in_flight=0, cache_budget=0, tolerance=2)


def test_per_turn_p50_is_the_median_of_each_turn() -> None:
    # turn 1 saw 1, 9, 2 s (median 2); turn 2 two samples (median between them); turn 3 none
    assert per_turn_p50([[1.0, 9.0, 2.0], [4.0, 6.0], []]) == [2.0, 5.0, 0.0]


def test_flatness_compares_the_middle_turn_with_the_last() -> None:
    assert flatness_turns(40) == (20, 40)
    assert flatness_turns(41) == (20, 41)
    assert flatness_turns(2) == (1, 2)
    with pytest.raises(ValueError, match="at least 2 turns"):
        flatness_turns(1)


def test_turn_ratio_is_one_based_later_over_earlier() -> None:
    lat = [float(t) for t in range(1, 41)]  # turn t took t seconds
    assert turn_ratio(lat, 40, 20) == 2.0
    assert turn_ratio(lat, 20, 40) == 0.5
    assert turn_ratio(lat, 1, 1) == 1.0
    assert turn_ratio(lat, 41, 20) is None, "no turn 41"
    assert turn_ratio([0.0, 1.0], 2, 1) is None, "a turn that took no time"
    with pytest.raises(ValueError, match="numbered from 1"):
        turn_ratio(lat, 0, 20)
