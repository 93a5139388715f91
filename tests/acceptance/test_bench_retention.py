"""``dormant bench retention`` (small): with retention the store goes flat (old tool
results cut, old runs of history deleted under their summary, dedup keys past the
horizon pruned); without it, it grows by every output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dormant.bench.retention import bench


async def test_with_retention_the_store_goes_flat(tmp_path: Path) -> None:
    summary = await bench(
        tmp_path, turns=120, output_kb=16, keep=10, every=10, sample_every=20, horizon_s=600
    )
    none, kept = summary["none"], summary["retention"]
    assert isinstance(none, dict) and isinstance(kept, dict)
    # 60 turns of 16 KiB outputs in the second half: the plain store grows by them all
    assert none["growth_second_half_bytes"] >= 60 * 16 * 1024
    # with retention it is flat: within a few 16 KiB pages of where it was at turn 60
    assert abs(kept["growth_second_half_bytes"]) <= 4 * 16 * 1024
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert (tmp_path / "samples.csv").read_text().count("\n") == 1 + 2 * 6
    # a summary every 10 turns: the plain store keeps all 12; retention those a fork at a
    # stored message could inherit (the history keeps 25 runs: the summaries made at turns
    # 100, 110, 120 and the one before the oldest stored run, at 90)
    assert none["final_summary_rows"] == 12
    assert kept["final_summary_rows"] == 4


async def test_one_mode_runs_alone(tmp_path: Path) -> None:
    summary = await bench(
        tmp_path, turns=20, output_kb=1, keep=5, every=5, sample_every=10, modes=("retention",)
    )
    assert "retention" in summary and "none" not in summary
    assert not (tmp_path / "none.db").exists()
    assert (tmp_path / "samples.csv").read_text().count("\n") == 1 + 2
    with pytest.raises(ValueError):
        await bench(tmp_path, turns=20, output_kb=1, keep=5, every=5, sample_every=10, modes=("all",))
