"""``dormant bench scale`` end to end, tiny: the outputs issue 3 names, and whether the
agent's limits counted tokens (a byte cap under a quarter of the token budget: no)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormant.cli import app

KEYS = {
    "store",
    "agents",
    "turns",
    "completions",
    "turns_per_s",
    "completions_per_s",
    "rss_start_bytes",
    "rss_end_bytes",
    "rss_slope_kib_per_agent",
    "db_bytes_per_agent",
    "raw_bytes_per_agent",
    "slice_p50_ms",
    "slice_p95_ms",
    "slice_p99_ms",
    "turn_latency_first_ms",
    "turn_latency_last_ms",
    "counts_tokens",
}


@pytest.mark.parametrize(("view_tokens", "counts"), [(0, False), (60_000, True)])
def test_bench_scale_writes_its_outputs_and_says_whether_tokens_were_counted(
    tmp_path: Path, view_tokens: int, counts: bool
) -> None:
    out = tmp_path / "scale"
    args = ["bench", "scale", "--store", "sqlite", "--agents", "12", "--turns", "2", "--wave", "6"]
    args += ["--view-bytes", "16384", "--view-tokens", str(view_tokens), "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary.keys() >= KEYS
    assert summary["completions"] == 12 * 2 * 2, "two completions a turn"
    assert summary["counts_tokens"] is counts
    if view_tokens:
        assert summary["view_tokens"] == view_tokens
    else:
        assert summary["view_tokens"] > 4 * 16384, "what a 128k window leaves"
    with open(out / "waves.csv") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["agents", "rss_bytes", "elapsed_s", "db_bytes"]
    assert [int(r[0]) for r in rows[1:]] == [6, 12]
    assert (out / "rss.png").stat().st_size > 0
