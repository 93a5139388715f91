"""Runtime fixtures: one store URL per backend, fast settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dormant.config import Settings


def fast_settings(**overrides: Any) -> Settings:
    """Settings for tests: short polls and backoffs; never read from the environment."""
    values: dict[str, Any] = {
        "concurrency": 32,
        "tool_concurrency": 32,
        "poll_s": 0.01,
        "lease_s": 10.0,
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        "model_retries": 3,
        "worker_id": "test-worker",
    }
    values.update(overrides)
    return Settings.build(**values)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store URL of each backend (PostgreSQL: a fresh schema, see ``pg_url``)."""
    if request.param == "memory":
        return "memory://"
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return url
    return f"sqlite:///{tmp_path}/dormant.db"
