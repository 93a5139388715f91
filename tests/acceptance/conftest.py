"""Fixtures of the acceptance tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from .runner import Cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """A CLI on a fresh SQLite file ``tmp_path/t.db``, run from ``tmp_path``."""
    return Cli(cwd=tmp_path, store=f"sqlite:///{tmp_path}/t.db")
