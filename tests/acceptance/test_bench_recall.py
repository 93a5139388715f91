"""``dormant bench recall`` end to end at a tiny scale: the summary keys the docs name, sane figures."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from dormant.cli.main import app

FIGURES = {"recall_at_1", "recall_at_5", "mrr", "stale_rate", "leak_rate", "p50_ms", "p99_ms", "rss_bytes"}
BASELINES = {
    "previous_default",
    "hybrid_no_structure",
    "recency_only",
    "fulltext_only",
    "fulltext_only_no_structure",
    "vector_only",
    "hybrid_no_decay",
    "hybrid_no_dictionary",
}
KINDS = {"latest_complaint", "current_city", "shipping_address", "complaint_synonym", "last_call"}


def test_bench_recall_writes_the_summary(tmp_path: Path) -> None:
    out = tmp_path / "recall"
    args = ["bench", "recall", "--memories", "400", "--subjects", "60", "--rich", "12",
            "--embedder", "hashing", "--queries", "20", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) >= FIGURES
    assert set(summary["baselines"]) == BASELINES
    for fig in [summary, *summary["baselines"].values()]:
        assert set(fig) >= FIGURES
        for key in ("recall_at_1", "recall_at_5", "mrr", "stale_rate", "leak_rate"):
            assert 0.0 <= fig[key] <= 1.0
        assert fig["recall_at_1"] <= fig["recall_at_5"]
    assert summary["leak_rate"] == 0.0
    assert summary["rss_bytes"] > 10_000_000
    lat = summary["details"]["latency"]
    assert [p["records"] for p in lat["points"]] == [100, 200, 300, 400]
    assert "stand in" in lat["embeddings"]
    quality = summary["details"]["quality"]
    assert quality["subjects"] == 60 and quality["queries"] > 12
    # the hybrid ranks better than recency alone even with hashing vectors
    assert summary["mrr"] > summary["baselines"]["recency_only"]["mrr"]
    # recall@1 and @5 per question kind, English and Chinese, with and without structure first
    cats = summary["per_category"]
    assert set(cats) == {"en", "zh"}
    for suite in ("en", "zh"):
        assert set(cats[suite]) == {"hybrid", "previous_default"}
        assert set(cats[suite]["hybrid"]) >= KINDS - ({"complaint_synonym"} if suite == "en" else set())
        assert {"recall_at_1", "recall_at_5"} <= set(cats[suite]["hybrid"]["current_city"])
        assert cats[suite]["hybrid"]["current_city"]["recall_at_1"] >= 0.9
    assert summary["zh"]["hybrid"]["leak_rate"] == 0.0
    assert "per question kind" in result.output


def test_bench_recall_through_slices_names_the_embedder_it_measured(tmp_path: Path) -> None:
    out = tmp_path / "slices"
    args = ["bench", "recall", "--slices", "3", "--memories", "200", "--subjects", "40", "--rich", "8",
            "--embedder", "hashing", "--out", str(out)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    slices = json.loads((out / "slices.json").read_text())
    assert slices["embedder"] == slices["latency"]["embedder"] == "hashing-384"
    assert slices["latency"]["slices_each"] == 3 and slices["latency"]["memories"] == 200
    assert slices["quality"]["leak_rate"] == 0.0
    bad = CliRunner().invoke(
        app, ["bench", "recall", "--slices", "3", "--embedder", "nope", "--out", str(out)]
    )
    assert bad.exit_code == 2 and "minilm, multilingual, hashing" in bad.output
