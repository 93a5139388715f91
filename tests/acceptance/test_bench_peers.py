"""``dormant bench peers`` end to end, tiny: LangGraph's three checkpointers (the real
packages, the ``peers`` extra) and dormant's three stores, each read back and checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormant.cli.main import app
from tests.pg import PgServer


def test_peers_tiny(tmp_path: Path, pg: PgServer) -> None:
    out = tmp_path / "p"
    args = [
        "bench",
        "peers",
        "--agents",
        "6",
        "--turns",
        "2",
        "--wave",
        "3",
        "--check",
        "6",
        "--out",
        str(out),
    ]
    result = CliRunner().invoke(app, args, env={"DORMANT_BENCH_PG_DSN": pg.url})
    assert result.exit_code == 0, result.output
    rows = {r["system"]: r for r in json.loads((out / "peers.json").read_text())}
    assert set(rows) == {
        "langgraph-sqlite",
        "langgraph-postgres",
        "langgraph-memory",
        "dormant-sqlite",
        "dormant-postgres",
        "dormant-memory",
    }
    for row in rows.values():
        assert row["verified"] and row["threads_checked"] == 6 and row["problems"] == []
        assert row["turns_per_s"] > 0
    assert rows["langgraph-sqlite"]["disk_bytes_per_agent"] > 0
    assert rows["langgraph-postgres"]["disk_bytes_per_agent"] > 0
    assert rows["dormant-postgres"]["disk_bytes_per_agent"] > 0
    ours = rows["dormant-sqlite"]
    want = ours["turns_per_s"] / rows["langgraph-sqlite"]["turns_per_s"]
    assert abs(ours["turns_per_s_x_peer"] - want) < 0.01 + want * 0.01
    assert "verified" in result.output and "True" in result.output


def test_peers_refuses_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p"
    result = CliRunner().invoke(app, ["bench", "peers", "--system", "crewai", "--out", str(out)])
    assert result.exit_code == 2 and "unknown 'crewai'" in result.output
    monkeypatch.setattr("dormant.bench.peers.missing_peer_packages", lambda: ["langgraph"])
    result = CliRunner().invoke(app, ["bench", "peers", "--out", str(out)])
    assert result.exit_code == 2 and "dormant[peers]" in result.output
    assert not out.exists()
