"""Poison pills: a tool that kills its worker every time, run by a worker
that is restarted after each death (as ``dormant run --workers`` does), ends within its
attempt cap: the call dead-lettered with an error result the agent sees (async tool),
or the thread marked failed (a slice that kills its worker). Attempts are counted when
the call or the slice is claimed, so the crashes count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.faults.conftest import REPO, worker_env
from tests.faults.poison_worker import CAP

#: restarts allowed: far more than the cap, so a pill run without bound shows as a failure
ROUNDS = CAP + 6


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store every worker process opens in turn (PostgreSQL: a fresh schema)."""
    if request.param == "postgres":
        pg: str = request.getfixturevalue("pg_url")
        return pg
    return f"sqlite:///{tmp_path}/poison.db"


def run_until_settled(url: str, tmp_path: Path, mode: str) -> tuple[dict[str, Any], int]:
    """Restart the poison worker after each death until one settles; what it printed and
    how many times the tool ran."""
    crashes = tmp_path / "crashes.log"
    for _ in range(ROUNDS):
        proc = subprocess.run(
            [sys.executable, "-m", "tests.faults.poison_worker", url, str(tmp_path), mode],
            cwd=REPO,
            env=worker_env(),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode == 0:
            runs = len(crashes.read_text().splitlines()) if crashes.exists() else 0
            return json.loads(proc.stdout.strip().splitlines()[-1]), runs
        assert proc.returncode == 137, proc.stderr
    raise AssertionError(f"the poison pill still ran after {ROUNDS} worker deaths")


@pytest.mark.timeout(180)
def test_an_async_call_that_kills_its_worker_every_time_is_dead_lettered_within_its_cap(
    url: str, tmp_path: Path
) -> None:
    result, runs = run_until_settled(url, tmp_path, "async")
    assert runs == CAP, "the call ran exactly its attempt cap of times"
    assert result["outbox"] == [["dead", CAP + 1]], "dead-lettered at the claim past the cap, unrun"
    assert result["status"] == "active"
    assert len(result["seen"]) == 1 and result["seen"][0].startswith("error: gave up: the call was claimed")


@pytest.mark.timeout(180)
def test_a_slice_that_kills_its_worker_every_time_marks_its_thread_failed_within_its_cap(
    url: str, tmp_path: Path
) -> None:
    result, runs = run_until_settled(url, tmp_path, "inline")
    assert runs == CAP + 1, "the slice ran model_retries + 1 times, as failing slices do"
    assert result["status"] == "failed"
    assert result["error"].startswith("PoisonPill:")
    assert result["seen"] == []
