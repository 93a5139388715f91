"""``dormant bench retention`` (small): with retention the store goes flat (old tool
results cut, old runs of history deleted under their summary, dedup keys past the
horizon pruned); without it, it grows by every output."""

from __future__ import annotations

import json
from pathlib import Path

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
