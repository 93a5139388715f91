"""``dormant bench matrix`` end to end on a tiny grid: every output it documents, one
row per cell, the image cell's photos stored once each, the memory cell's embedder apart."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from dormant.bench.matrix import quick_grid
from dormant.bench.matrix_cell import LONG_MESSAGES, history_turns, long_threads
from dormant.cli.main import app


def test_history_shapes() -> None:
    assert history_turns(5, "uniform") == [20] * 5
    tail = history_turns(10_000, "longtail")
    assert sorted(tail)[len(tail) // 2] <= 2 and max(tail) == 40  # most threads short
    assert long_threads(2_500, "longtail") == [0, 1000] and long_threads(10, "uniform") == []
    assert LONG_MESSAGES == 10_000
    cells = quick_grid(1_000, (1_000, 10_000))
    assert len(cells) == len(set(cells)) == 8
    assert {c.mix for c in cells} == {"text", "blobs", "images", "memory"}


def test_matrix_tiny_grid(tmp_path: Path) -> None:
    out = tmp_path / "m"
    args = [
        "bench",
        "matrix",
        "--quick",
        "--sessions",
        "10",
        "--sessions",
        "30",
        "--rounds",
        "2",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "matrix.json").read_text())
    assert len(rows) == 8
    with open(out / "matrix.csv", newline="") as handle:
        assert len(list(csv.DictReader(handle))) == 8
    by = {(r["sessions"], r["active_pct"], r["history"], r["mix"]): r for r in rows}
    images = by[(10, 10.0, "uniform", "images")]
    assert images["status"] == "ok"
    base, bigger = by[(10, 10.0, "uniform", "text")], by[(30, 10.0, "uniform", "text")]
    assert base["status"] == bigger["status"] == "ok"
    # the slope is fitted across the cells that differ only in sessions
    assert base["rss_slope_kib_per_session"] == bigger["rss_slope_kib_per_session"] is not None
    assert base["threads_active"] == 1 and base["threads_idle"] == 9
    assert base["slices"] >= 2 * 2  # two rounds of one thread, two slices a turn at least
    assert 0 < base["slice_p50_ms"] <= base["slice_p95_ms"] <= base["slice_p99_ms"]
    assert base["db_bytes"] > 0 and base["queue_depth_max"] == 1
    every = by[(10, 100.0, "uniform", "text")]
    assert every["threads_idle"] == 0 and every["queue_depth_max"] == 10
    tail = by[(10, 10.0, "longtail", "text")]
    assert tail["db_bytes"] > base["db_bytes"]  # the 10,000-message thread is on disk
    memory = by[(10, 10.0, "longtail", "memory")]
    assert memory["status"] == "ok" and memory["embedder_rss_bytes"] > 20 << 20
    assert memory["formula_predicted_bytes"] > memory["embedder_rss_bytes"]
    blobs = by[(10, 10.0, "uniform", "blobs")]
    assert blobs["db_bytes"] > base["db_bytes"] + 10 * 20 * 10_000  # 50 KB outputs stored, one per turn
    # ten photos of ~190 KB stored once each (not once per turn or per view)
    assert base["db_bytes"] + 10 * 150_000 < images["db_bytes"] < blobs["db_bytes"]
    assert (out / "matrix.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (out / "report.html").read_text()
    assert "data:image/png;base64," in page and "<h2>by sessions</h2>" in page
    assert "http" not in page.replace("http-equiv", "")  # no external assets


def test_matrix_needs_one_preset(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "matrix", "--out", str(tmp_path)])
    assert result.exit_code == 2 and "--quick or --full" in result.output
    assert not any(tmp_path.iterdir())
