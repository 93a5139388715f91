"""``dormant bench chaos --store postgres`` end to end, tiny: one kill beside a standby
worker, one poison pill of each kind with a cap of one attempt; the verdict, the figures
it reports, and the summary file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormant.cli.main import app
from tests.pg import PgServer


@pytest.mark.timeout(120)
def test_bench_chaos_on_postgres_passes_and_reports_resume_and_pills(
    tmp_path: Path, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DORMANT_BENCH_PG_DSN", pg.url)  # the run makes (and drops) its own schema
    out = tmp_path / "chaos"
    args = ["bench", "chaos", "--store", "postgres", "--kills", "1", "--threads", "4", "--turns", "2"]
    args += ["--concurrency", "4", "--pills", "1", "--tool-attempts", "1", "--seed", "3", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "chaos on postgres" in text and "a standby worker" in text
    assert "PASS: 1 kills survived" in text
    assert "2/2 poison pills dead-lettered" in text and "cap 1" in text
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["store"], summary["standby"], summary["passed"]) == ("postgres", True, True)
    assert (summary["pills"], summary["pills_dead_lettered"], summary["poison_violations"]) == (2, 2, 0)
    assert summary["pill_claims_max"] <= 2 and summary["pill_runs_max"] <= 1
    assert summary["integrity_checked"] is False
