"""``dormant run --metrics-port``: Prometheus metrics over HTTP on loopback."""

from __future__ import annotations

import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from .runner import Cli, clean_env

EXPECTED = (
    "dormant_rss_bytes",
    "dormant_memory_level",
    "dormant_memory_soft_limit_bytes",
    "dormant_memory_hard_limit_bytes",
    "dormant_memory_level_entries_total",
    "dormant_memory_admissions_refused_total",
    "dormant_slices_active",
    "dormant_concurrency",
    'dormant_backlog_inputs{priority="P1"}',
    "dormant_threads_ready",
    "dormant_view_cache_bytes",
    "dormant_view_cache_entries",
    "dormant_view_cache_hit_ratio",
    "dormant_slice_seconds_bucket",
    "dormant_model_seconds_bucket",
    "dormant_tool_seconds_bucket",
    "dormant_dead_letters",
    "dormant_leases_lost_total",
    "dormant_db_bytes",
    "dormant_wal_bytes",
    "dormant_oldest_ready_input_age_seconds",
    'dormant_retention_tier_bytes{tier="tool_full"}',
    'dormant_retention_tier_bytes{tier="tool_excerpt"}',
    'dormant_retention_tier_bytes{tier="history"}',
    'dormant_retention_tier_bytes{tier="journal"}',
    'dormant_retention_tier_bytes{tier="blobs"}',
    'dormant_retention_tier_bytes{tier="dedup_keys"}',
    "dormant_checkpoint_age_seconds",
    "dormant_checkpoint_bytes",
    "dormant_recovery_seconds_estimate",
)


def value(body: str, sample: str) -> float:
    match = re.search(rf"^{re.escape(sample)} (\S+)$", body, re.MULTILINE)
    assert match, f"{sample} not in /metrics"
    return float(match.group(1))


def test_run_serves_metrics_on_loopback(cli: Cli) -> None:
    for n in range(3):
        cli.ok("send", f"t{n}", f"hello {n}", "--key", f"k{n}")
    proc = subprocess.Popen(
        cli.argv("run", "--metrics-port", "0"),
        cwd=cli.cwd,
        env=clean_env({"DORMANT_MEMORY_LIMIT": "8G"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        url = None
        deadline = time.monotonic() + 30
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            found = re.search(r"metrics at (http://127\.0\.0\.1:\d+/metrics)", line)
            url = found.group(1) if found else None
        assert url, "no metrics address printed"
        body = ""
        while time.monotonic() < deadline:  # until the three inputs are answered
            with urllib.request.urlopen(url, timeout=5) as response:
                assert response.headers["Content-Type"].startswith("text/plain")
                body = response.read().decode()
            if value(body, "dormant_slices_total") >= 3:
                break
            time.sleep(0.2)
        for name in EXPECTED:
            assert name in body, name
        assert value(body, "dormant_slices_total") >= 3
        assert value(body, "dormant_slice_seconds_count") >= 3
        assert value(body, "dormant_model_seconds_count") >= 3
        assert value(body, "dormant_memory_hard_limit_bytes") == 8 * 1024**3
        assert 10 * 1024**2 < value(body, "dormant_rss_bytes") < 8 * 1024**3
        assert value(body, "dormant_db_bytes") > 0
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(url.replace("/metrics", "/other"), timeout=5)
        assert missing.value.code == 404
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_metrics_port_is_refused_with_several_workers(cli: Cli) -> None:
    result = cli("run", "--workers", "2", "--metrics-port", "9999")
    assert result.returncode == 2
    assert "--metrics-port" in result.stderr
