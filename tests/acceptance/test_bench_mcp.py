"""``dormant bench mcp`` runs small and writes its figures."""

from __future__ import annotations

import json

from tests.acceptance.runner import Cli


def test_bench_mcp_compares_an_mcp_call_with_a_plain_async_tool(cli: Cli) -> None:
    out = cli.cwd / "bench-mcp"
    result = cli(
        "bench", "mcp", "--calls", "5", "--servers", "2", "--out", str(out), store=False, timeout=180
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary) == {"plain_c1", "mcp_c1", "plain_c64", "mcp_c64", "mcp_2_servers_c64"}
    for run in summary.values():
        assert run["calls"] == 5 and run["call_p99_ms"] >= run["call_p50_ms"] > 0
    assert (
        summary["mcp_c1"]["server_cpu_ms_per_call"] > 0 and summary["plain_c1"]["server_cpu_ms_per_call"] == 0
    )
    assert (
        summary["mcp_2_servers_c64"]["rss_idle_with_servers_mib"]
        > summary["mcp_c1"]["rss_idle_with_servers_mib"]
    )


def test_bench_mcp_recall_compares_mcp_with_rest(cli: Cli) -> None:
    out = cli.cwd / "bench-mcp-recall"
    result = cli(
        "bench",
        "mcp-recall",
        "--calls",
        "20",
        "--memories",
        "10",
        "--out",
        str(out),
        store=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["calls"] == 20 and summary["memories"] == 10
    for way in ("rest", "mcp"):
        assert summary[way]["p99_ms"] >= summary[way]["p50_ms"] > 0 and summary[way]["cpu_ms_per_call"] > 0
