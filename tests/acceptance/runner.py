"""Runs the ``dormant`` CLI in a subprocess, isolated from the caller's DORMANT_* environment."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

Result = subprocess.CompletedProcess[str]


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without DORMANT_* variables or API keys, plus ``extra``.

    A wide terminal keeps rich tables from folding the values the tests look for.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_") and k != "OPENAI_API_KEY"}
    env.update({"COLUMNS": "200", "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra or {})
    return env


@dataclass
class Cli:
    """Runs ``python -m dormant.cli`` in ``cwd``, against ``store`` unless told otherwise."""

    cwd: Path
    store: str

    def argv(self, *args: str, store: bool = True) -> list[str]:
        """The command line of ``dormant ARGS`` (with ``--store`` appended when ``store``)."""
        argv = [sys.executable, "-m", "dormant.cli", *args]
        return [*argv, "--store", self.store] if store else argv

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str] | None = None,
        store: bool = True,
        timeout: float = 60.0,
    ) -> Result:
        """Run one command and return what it did, whatever its exit code."""
        return subprocess.run(
            self.argv(*args, store=store),
            cwd=self.cwd,
            env=clean_env(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def ok(self, *args: str, input: str | None = None, env: Mapping[str, str] | None = None) -> str:
        """Run a command that must succeed; its stdout."""
        result = self(*args, input=input, env=env)
        assert result.returncode == 0, (
            f"dormant {' '.join(args)}: exit {result.returncode}\n"
            f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
        )
        return result.stdout


def assert_usage_error(result: Result, *fragments: str) -> None:
    """Exit code 2, one ``error:`` line on stderr naming ``fragments``, no traceback."""
    assert result.returncode == 2, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    assert result.stderr.startswith("error: "), result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for fragment in fragments:
        assert fragment in result.stderr, result.stderr
