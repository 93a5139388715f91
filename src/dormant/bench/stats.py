"""The benchmarks' arithmetic, pure: percentiles, least-squares slopes, ratios and the
memory formula check.

Nothing here reads the clock, the process or a file, so every figure the matrix and
the peers comparison print can be checked by a unit test.

The formula the design states for process RSS is ``RSS ≈ base + C x W + B (+ embedder)``:
``base`` the runtime with no work, ``C`` the bytes one slice in flight costs, ``W``
the slices in flight (the concurrency cap, or fewer), ``B`` the view cache's budget
and the embedder's RSS when long-term memory is on. :func:`formula_check` says how far
a measured RSS is from it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "FormulaCheck",
    "flatness_turns",
    "formula_check",
    "linear_fit",
    "per_turn_p50",
    "percentile",
    "percentiles",
    "ratio",
    "slope_per_unit",
    "turn_ratio",
]


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0..100) of ``values``, linear between closest ranks
    (numpy's default); 0.0 for no values. Raises ValueError for ``p`` outside 0..100."""
    if not 0 <= p <= 100:
        raise ValueError(f"a percentile is within 0..100, not {p}")
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = p / 100 * (len(ordered) - 1)
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def percentiles(values: Sequence[float], ps: Sequence[float] = (50, 95, 99)) -> dict[str, float]:
    """``{"p50": ..., "p95": ..., "p99": ...}`` of ``values`` (keys from ``ps``)."""
    return {f"p{p:g}": percentile(values, p) for p in ps}


def linear_fit(points: Sequence[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares ``(slope, intercept)`` of ``y`` over ``x``; ``(0.0, mean y)`` when
    fewer than two distinct ``x`` (no slope can be told), ``(0.0, 0.0)`` for no points."""
    if not points:
        return 0.0, 0.0
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    den = sum((x - mx) ** 2 for x, _ in points)
    if den == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in points) / den
    return slope, my - slope * mx


def slope_per_unit(points: Sequence[tuple[float, float]], scale: float = 1024.0) -> float:
    """The least-squares slope of ``y`` (bytes) over ``x`` (sessions, agents), divided
    by ``scale`` (KiB per unit by default)."""
    if scale <= 0:
        raise ValueError("scale must be positive")
    return linear_fit(points)[0] / scale


def ratio(ours: float, theirs: float, *, higher_is_better: bool = True) -> float | None:
    """How many times better ``ours`` is than ``theirs``: ``ours / theirs`` for a figure
    where higher is better (turns/s), ``theirs / ours`` otherwise (RSS, bytes, latency).
    None when the division has no meaning (a zero or negative figure)."""
    num, den = (ours, theirs) if higher_is_better else (theirs, ours)
    if num <= 0 or den <= 0:
        return None
    return num / den


def per_turn_p50(rounds: Sequence[Sequence[float]]) -> list[float]:
    """Per turn index, the median of its samples: ``rounds[k]`` holds the times of turn
    ``k + 1`` (one per wave, or one per agent); an empty turn gives 0.0."""
    return [percentile(samples, 50) for samples in rounds]


def flatness_turns(turns: int) -> tuple[int, int]:
    """The two turns (1-based) the flatness figure compares for a run of ``turns`` turns:
    the middle one and the last (``(20, 40)`` for 40 turns). Raises ValueError below 2."""
    if turns < 2:
        raise ValueError(f"a flatness figure needs at least 2 turns, not {turns}")
    return turns // 2, turns


def turn_ratio(latencies: Sequence[float], later: int, earlier: int) -> float | None:
    """Latency of turn ``later`` over that of turn ``earlier`` (1-based indexes into
    ``latencies``, turn 1 first): 1.0 is flat, 1.1 a tenth slower. None when either turn
    is missing or took no time. Raises ValueError for a turn below 1."""
    if later < 1 or earlier < 1:
        raise ValueError("turns are numbered from 1")
    if later > len(latencies) or earlier > len(latencies):
        return None
    return ratio(latencies[later - 1], latencies[earlier - 1], higher_is_better=True)


@dataclass(frozen=True)
class FormulaCheck:
    """A measured RSS against ``base + C x W + B (+ embedder)``."""

    predicted: float
    measured: float
    #: measured / predicted (1.0: the formula holds exactly)
    ratio: float
    #: whether ``ratio`` is within ``1 ± tolerance``
    holds: bool


def formula_check(
    measured: float,
    *,
    base: float,
    per_slice: float,
    in_flight: int,
    cache_budget: float,
    embedder: float = 0.0,
    tolerance: float = 0.25,
) -> FormulaCheck:
    """Check ``measured ≈ base + per_slice x in_flight + cache_budget + embedder``
    (bytes). ``cache_budget`` is the most the view cache may hold (an upper bound, so
    the formula over-predicts when the cache is not full: ``holds`` also accepts any
    measured RSS below the prediction down to ``base``). Raises ValueError for a
    negative term or a tolerance outside 0..1."""
    for name, value in (
        ("base", base),
        ("per_slice", per_slice),
        ("in_flight", in_flight),
        ("cache_budget", cache_budget),
        ("embedder", embedder),
    ):
        if value < 0:
            raise ValueError(f"{name} must not be negative")
    if not 0 <= tolerance <= 1:
        raise ValueError("tolerance is within 0..1")
    predicted = base + per_slice * in_flight + cache_budget + embedder
    r = measured / predicted if predicted > 0 else math.inf
    holds = base + embedder <= measured <= predicted * (1 + tolerance) or abs(r - 1) <= tolerance
    return FormulaCheck(predicted=predicted, measured=measured, ratio=r, holds=holds)
