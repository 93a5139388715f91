"""``dormant bench scale`` end to end, tiny: the outputs it documents, whether the
agent's limits counted tokens (a byte cap under a quarter of the token budget: no), and
on PostgreSQL the bytes of the store's tables."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import psycopg
import pytest
from typer.testing import CliRunner

from dormant.bench.pg import schema_bytes
from dormant.cli.main import app
from tests.pg import PgServer

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
    "turn_latency_p50_ms",
    "flatness_turns",
    "flatness",
    "flatness_rounds",
    "flatness_cpu",
    "turn_cpu_ms",
    "turn_slice_p50_ms",
    "rss_peak_bytes",
    "rss_peak_sampled_bytes",
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
    # a watcher process sampled the run: at least what the process had at its start
    assert summary["rss_watch_samples"] > 0
    assert summary["rss_peak_sampled_bytes"] >= summary["rss_start_bytes"] > 0
    assert "rss_peak_sampled_bytes" in result.output
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


def test_bench_scale_under_the_default_view_never_loads_the_tokenizer(tmp_path: Path) -> None:
    """256 KiB views could pass a 128k window's budget, so the limits count;
    but no agent_scale view comes near it, so no count is ever needed."""
    out = tmp_path / "scale"
    args = ["bench", "scale", "--store", "sqlite", "--agents", "8", "--turns", "20", "--wave", "8"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completions"] == 8 * 20 * 2
    assert len(summary["turn_latency_p50_ms"]) == 20
    assert summary["flatness_turns"] == [10, 20]
    rounds, slices = summary["turn_latency_p50_ms"], summary["turn_slice_p50_ms"]
    assert len(slices) == 20 and min(slices) > 0
    # the summary rounds the per-turn medians: their ratio matches within 1 %
    assert summary["flatness"] == pytest.approx(slices[19] / slices[9], rel=1e-2)
    assert summary["flatness_rounds"] == pytest.approx(rounds[19] / rounds[9], rel=1e-2)
    cpu = summary["turn_cpu_ms"]
    assert len(cpu) == 20 and min(cpu) > 0
    assert summary["flatness_cpu"] == pytest.approx(cpu[19] / cpu[9], rel=1e-2)
    assert summary["rss_peak_bytes"] >= summary["rss_end_bytes"]
    assert "flatness (slice p50, turn 20 / turn 10)" in result.output
    assert summary["counts_tokens"] is True, "the byte cap alone does not prove the fit"
    assert summary["tokenizer_loaded"] is False


def test_bench_scale_on_postgres_reports_the_database_bytes_of_its_tables(
    tmp_path: Path, pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DORMANT_BENCH_PG_DSN", pg.url)  # the run makes (and drops) its own schema
    out = tmp_path / "scale"
    args = ["bench", "scale", "--store", "postgres", "--agents", "6", "--turns", "2", "--wave", "3"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    assert summary["completions"] == 6 * 2 * 2
    # tables + indexes + TOAST in 8 KiB pages: more than the conversation text itself
    assert summary["db_bytes_per_agent"] > summary["raw_bytes_per_agent"] > 0
    assert summary["db_bytes"] % 8192 == 0
    with open(out / "waves.csv") as handle:
        waves = [int(r["db_bytes"]) for r in csv.DictReader(handle)]
    assert len(waves) == 2 and 0 < waves[0] <= waves[1] <= summary["db_bytes"]


def test_schema_bytes_sums_every_table_of_the_schema_with_its_indexes_and_toast(pg_url: str) -> None:
    assert schema_bytes(pg_url) == 0, "a fresh schema holds no table"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE a (id bigint PRIMARY KEY, body text)")
        empty = schema_bytes(pg_url)
        conn.execute("INSERT INTO a SELECT g, repeat('x', 500) FROM generate_series(1, 2000) g")
        one = schema_bytes(pg_url)
        conn.execute("CREATE TABLE b (body text)")
        conn.execute("INSERT INTO b SELECT string_agg(md5(g::text), '') FROM generate_series(1, 20000) g")
        row = conn.execute(
            "SELECT pg_total_relation_size('a') + pg_total_relation_size('b'),"
            " pg_relation_size('a') + pg_relation_size('b')"
        ).fetchone()
    assert row is not None
    assert 0 < empty < one, "the primary key index counts even before any row"
    assert one >= 2000 * 500
    assert schema_bytes(pg_url) == row[0] > row[1], "indexes and TOAST are counted, not only the heap"
