"""A small ``dormant bench chaos`` run on each backend: a victim worker SIGKILLed a few
times beside a standby worker, with poison pills (a tool that ends its worker, one that
never returns) in the mix. Every check of the chaos checker must hold: nothing lost or
doubled, each pill dead-lettered within its attempt cap with its thread answered.

The big run is ``tests/faults/test_kill9.py`` (SQLite, 20 kills) and the bench itself.
Set DORMANT_CHAOS_SEED to replay a run's kill times.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from dormant.bench.chaos import ChaosConfig, run_chaos
from dormant.bench.chaos_check import FAILURES

CAP = 2


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """The backend and, for PostgreSQL, a fresh schema's URL."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("pg_url")
        return "postgres", url
    return "sqlite", None


@pytest.mark.timeout(90)
def test_a_small_chaos_run_with_a_standby_and_poison_pills_passes_every_check(
    store: tuple[str, str | None], tmp_path: Path
) -> None:
    seed = int(os.environ.get("DORMANT_CHAOS_SEED") or random.randrange(2**31))
    kind, url = store
    config = ChaosConfig(
        out=tmp_path,
        threads=12,
        turns=3,
        kills=3,
        concurrency=8,
        seed=seed,
        early_share=0.0,
        ack_share=0.34,
        final_timeout_s=40,
        store=kind,
        url=url,
        pills=1,
        tool_attempts=CAP,
    )
    summary = run_chaos(config, echo=lambda line: None)
    where = f"(DORMANT_CHAOS_SEED={seed}; {tmp_path}/worker.log)"
    assert summary["problems"] == [], where
    assert summary["kills"] == 3, where
    for key in FAILURES:
        assert summary[key] == 0, f"{key}: {summary['problems']} {where}"
    assert summary["messages"] == summary["expected_messages"]
    assert summary["passed"]
    assert summary["integrity_checked"] == (kind == "sqlite")
    # both pills ended dead-lettered within the cap, and the crash pill did kill workers
    assert (summary["pills"], summary["pills_dead_lettered"]) == (2, 2), where
    assert summary["pill_claims_max"] <= CAP + 1 and summary["pill_runs_max"] <= CAP
    assert summary["poison_deaths"] >= 1, where
    assert summary["standby"] and summary["resume_measures"].startswith("kill -> every thread")
