"""``dormant run --workers N``: supervised worker processes on one store."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from .runner import Cli, assert_usage_error, clean_env


@pytest.fixture(params=["sqlite", "postgres"])
def shared_cli(request: pytest.FixtureRequest, tmp_path: Path) -> Cli:
    """A CLI on a store several processes can share."""
    if request.param == "postgres":
        return Cli(cwd=tmp_path, store=request.getfixturevalue("pg_url"))
    return Cli(cwd=tmp_path, store=f"sqlite:///{tmp_path}/t.db")


def wait_for(path: Path, pattern: str, timeout: float = 30.0) -> re.Match[str]:
    """The first match of ``pattern`` in the file at ``path``, waiting for it to appear."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        match = re.search(pattern, path.read_text() if path.exists() else "")
        if match:
            return match
        time.sleep(0.05)
    raise AssertionError(f"{pattern!r} never appeared in:\n{path.read_text()}")


def test_workers_run_until_idle(shared_cli: Cli) -> None:
    shared_cli.ok("init")
    for n in range(3):
        shared_cli.ok("send", f"t{n}", f"hello {n}", "--key", "k1")
    result = shared_cli("run", "--workers", "2", "--until-idle", timeout=120)
    assert result.returncode == 0, result.stderr
    assert "workers stopped (exit 0)" in result.stdout
    assert len(re.findall(r"worker \d started", result.stderr)) == 2
    status = json.loads(shared_cli.ok("status", "--json"))
    assert status["messages"] == 6 and status["threads_ready"] == 0


def test_a_killed_worker_is_restarted_and_sigterm_stops_all(shared_cli: Cli, tmp_path: Path) -> None:
    shared_cli.ok("init")
    log = tmp_path / "supervisor.log"
    with open(log, "w") as stderr:
        proc = subprocess.Popen(
            shared_cli.argv("run", "--workers", "2"),
            cwd=shared_cli.cwd,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
        try:
            victim = int(wait_for(log, r"worker 0 started \(pid (\d+)\)").group(1))
            wait_for(log, r"worker 1 started")
            wait_for(log, r"dormant running on .*\n(.|\n)*dormant running on ")  # both workers up
            subprocess.run(["kill", "-9", str(victim)], check=True)
            wait_for(log, r"worker 0 died \(exit -9\); restarting it in 1s")
            wait_for(log, r"worker 0 started \(pid (?!" + str(victim) + r"\))\d+\)")
            # the new worker is up (its signal handlers too) once it says it is running
            wait_for(log, r"(dormant running on (.|\n)*){3}")
            shared_cli.ok("send", "t1", "still served", "--key", "k1")
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, log.read_text()
    assert "workers stopped (exit 0)" in out
    text = log.read_text()
    assert "stopping workers" in text and text.count("finished") == 2


def test_workers_need_a_shared_store(tmp_path: Path) -> None:
    cli = Cli(cwd=tmp_path, store="memory://")
    assert_usage_error(cli("run", "--workers", "2"), "memory://", "--workers")
