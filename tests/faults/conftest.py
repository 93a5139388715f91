"""Fixtures of the fault tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def worker_env() -> dict[str, str]:
    """The environment of a worker subprocess: this checkout importable, no DORMANT_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)
    return env


class Workers:
    """Starts ``python -m tests.faults.worker ...`` processes and kills the leftovers at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start one worker with ``args``; its stdout and stderr are captured."""
        return self.start_module("tests.faults.worker", *args)

    def start_module(self, module: str, *args: str) -> subprocess.Popen[str]:
        """Start ``python -m module args``; its stdout and stderr are captured."""
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=REPO,
            env=worker_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.procs.append(proc)
        return proc


@pytest.fixture
def workers() -> Iterator[Workers]:
    """A :class:`Workers`; every process still running at teardown is killed."""
    pool = Workers()
    try:
        yield pool
    finally:
        for proc in pool.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=10)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL of each backend (the in-process fault tests run on all of them;
    PostgreSQL: a fresh schema, see ``pg_url``)."""
    if request.param == "memory":
        return "memory://"
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/dormant.db"
