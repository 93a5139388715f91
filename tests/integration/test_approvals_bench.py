"""``dormant bench approvals`` runs small and reports what it measured."""

from __future__ import annotations

from pathlib import Path

from dormant.bench.approvals import run_approvals_bench


async def test_the_approvals_bench_runs_small(tmp_path: Path) -> None:
    summary = await run_approvals_bench(tmp_path, threads=100, decide=20, repeats=20)
    assert summary["open_waits"] == 100
    assert summary["expired"] == 100
    assert summary["decide_to_run_p50_ms"] > 0
    assert (tmp_path / "summary.json").exists()
