"""The bounded latency recorder."""

from __future__ import annotations

from dormant.metrics import LatencyRecorder, RuntimeStats


def test_empty_recorder_reports_zeros() -> None:
    rec = LatencyRecorder()
    assert rec.percentile(50) == 0.0
    assert rec.mean == 0.0
    assert rec.count == 0


def test_percentiles_of_a_small_sample_are_exact() -> None:
    rec = LatencyRecorder()
    for ms in range(1, 101):
        rec.add(ms / 1000)
    assert rec.percentile(0) == 0.001
    assert rec.percentile(50) in (0.050, 0.051)
    assert rec.percentile(99) == 0.099
    assert rec.percentile(100) == 0.100
    assert abs(rec.mean - 0.0505) < 1e-9
    # out-of-range requests are clamped, not errors
    assert rec.percentile(-5) == 0.001
    assert rec.percentile(250) == 0.100


def test_memory_is_bounded_but_count_and_mean_cover_everything() -> None:
    rec = LatencyRecorder(capacity=64, seed=1)
    for i in range(10_000):
        rec.add(float(i % 100))
    assert rec.count == 10_000
    assert len(rec._sample) == 64
    assert abs(rec.mean - 49.5) < 1e-9
    assert 0.0 <= rec.percentile(50) <= 99.0


def test_reservoir_sample_stays_representative() -> None:
    rec = LatencyRecorder(capacity=1000, seed=3)
    for i in range(100_000):
        rec.add(i / 100_000)
    assert 0.4 < rec.percentile(50) < 0.6
    assert rec.percentile(99) > 0.9


def test_reset_forgets_everything() -> None:
    rec = LatencyRecorder()
    rec.add(1.0)
    rec.reset()
    assert (rec.count, rec.mean, rec.percentile(50)) == (0, 0.0, 0.0)


def test_runtime_stats_start_at_zero_with_their_own_recorder() -> None:
    a, b = RuntimeStats(), RuntimeStats()
    assert a.slices == a.tool_calls == a.leases_lost == 0
    a.slice_latency.add(1.0)
    assert b.slice_latency.count == 0
