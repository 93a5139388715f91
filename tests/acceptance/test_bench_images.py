"""``dormant bench images`` and ``dormant bench upload`` end to end, tiny: the outputs
they document, the images really sent to the loopback vision server, the shared
picture stored once."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from dormant.bench.images import image_counts
from dormant.cli.main import app


def test_bench_images_writes_its_figures_and_sends_every_image(tmp_path: Path) -> None:
    out = tmp_path / "images"
    args = ["bench", "images", "--agents", "6", "--wave", "3", "--probe", "2", "--scale-turns", "1"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "the one shared picture when g is even (15 copies)" in result.output
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["images_sent"], summary["shared_copies"], summary["distinct_pictures"]) == image_counts(6)
    # one copy of each distinct picture: the 15 copies of the shared one are stored once
    assert summary["unique_bytes"] > 15 * 190_000
    assert summary["store_bytes"] > summary["unique_bytes"]
    assert set(summary["rss_slope_kib_per_agent"]) == {"images", "text", "agent_scale"}
    assert summary["waves"]["images"][-1][0] == 6 and len(summary["waves"]["text"]) == 2
    images = json.loads((out / "images" / "summary.json").read_text())
    # every slice's request carried its view's images as data URIs: 6 first slices with 5,
    # then 2 probes with 5, plus 2 + 2 text-only slices with none
    assert images["server"]["images"] == (6 + 2) * 5 and images["server"]["requests"] == 6 + 2 + 2 + 2
    assert images["probes"] == 2 and images["text_probe"]["cpu_ms"] > 0
    assert images["probe_cpu_ms"] > 0
    assert images["blob_bytes"] == images["unique_bytes"] and images["blobs"] == images["distinct_pictures"]
    text = json.loads((out / "text" / "summary.json").read_text())
    assert text["server"]["images"] == 0 and text["unique_bytes"] == 0
    assert "extra_per_probe_slice_paired" in summary


def test_bench_upload_passes_on_a_small_file(tmp_path: Path) -> None:
    out = tmp_path / "upload"
    result = CliRunner().invoke(app, ["bench", "upload", "--mib", "4", "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == 202 and summary["stored_bytes"] == 4 * 1024 * 1024
    assert summary["samples"] > 0 and summary["passed"] is True
