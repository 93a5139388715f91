"""``dormant bench serve`` in miniature: a ``dormant serve`` subprocess under SSE clients and posters."""

from __future__ import annotations

import json
from pathlib import Path

from dormant.bench.serve import Params, pct, run


async def test_tiny_serve_load_measures_every_figure(tmp_path: Path) -> None:
    fig = await run(Params(clients=10, posters=2, seconds=2.0), tmp_path)
    assert fig.clients_connected == 10
    assert fig.admissions > 0 and fig.errors == 0 and fig.streams_dropped == 0
    assert fig.admissions_per_s > 0 and 0 < fig.admit_p50_ms <= fig.admit_p99_ms
    # every admission's user message and reply reached its stream (the last ones had 2 s)
    assert fig.events >= fig.admissions
    assert 0 < fig.user_lag_p50_ms <= fig.user_lag_p99_ms
    assert fig.rss_idle_bytes > 0 and fig.rss_connected_bytes > 0 and fig.rss_end_bytes > 0
    assert fig.queue_cap_total_bytes == 10 * fig.stream_queue_bytes
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["admissions"] == fig.admissions


def test_percentiles() -> None:
    assert pct([], 0.5) == 0.0
    assert pct([3.0, 1.0, 2.0], 0.5) == 2.0
    assert pct([float(i) for i in range(100)], 0.99) == 99.0
