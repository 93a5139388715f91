"""kill -9 torture: the chaos workload (threads x turns with async, inline and non-idempotent
tools, child threads and poison pills) is SIGKILLed 20 times at random moments and restarted
each time; then the store must show that nothing was lost, doubled, reordered or left
hanging, and each pill dead-lettered in its cap. One worker, no standby: every recovery is
a new process opening the store after a kill (the dead worker's 30 s leases freed as it
opens). With a standby worker beside the victim: tests/faults/test_chaos_small.py.

The harness and its checks are ``dormant bench chaos`` (dormant.bench.chaos); this test
runs it small and then checks the same store again with the test suite's own history
rules (tests.helpers.check_history), independently of the harness's checker.
Set DORMANT_CHAOS_SEED to replay a run's kill times.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from dormant.bench.chaos import ChaosConfig, run_chaos
from dormant.bench.chaos_check import FAILURES
from dormant.bench.chaos_worker import has_follow_up, thread_ids
from dormant.store.sqlite import SQLiteStore
from tests.helpers import all_messages, check_history

THREADS = 40
TURNS = 8
KILLS = 20


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_twenty_kill_9s_lose_double_and_reorder_nothing(tmp_path: Path) -> None:
    seed = int(os.environ.get("DORMANT_CHAOS_SEED") or random.randrange(2**31))
    config = ChaosConfig(
        out=tmp_path,
        threads=THREADS,
        turns=TURNS,
        kills=KILLS,
        seed=seed,
        early_share=0.15,
        ack_share=0.15,
        final_timeout_s=60,
        standby=False,
    )
    summary = run_chaos(config, echo=lambda line: None)
    where = f"(DORMANT_CHAOS_SEED={seed}; {tmp_path}/worker.log)"
    assert summary["kills"] == KILLS, f"{summary['problems']} {where}"
    assert summary["problems"] == [], where
    for key in FAILURES:
        assert summary[key] == 0, f"{key}: {summary['problems']} {where}"
    assert summary["integrity_ok"]
    assert summary["messages"] == summary["expected_messages"]
    assert summary["passed"]
    # the kills landed all along the run, and some hit tool calls in flight: the
    # crash rules of the outbox were exercised, not just the happy path
    assert summary["kills_mid_work"] >= KILLS // 2, where
    assert summary["kills_after_ack"] == 3, f"3 kills right after an acknowledgment {where}"
    assert summary["unknown_outcomes"] + summary["idempotent_reruns"] > 0, where
    assert summary["recovery_samples"] >= KILLS // 2
    assert summary["pills"] == summary["pills_dead_lettered"] == 2, where
    print(
        f"chaos: {summary['kills']} kills, {summary['inputs']} inputs verified, recovery p50 "
        f"{summary['recovery_p50_ms']} ms p95 {summary['recovery_p95_ms']} ms, "
        f"{summary['unknown_outcomes']} unknown outcomes, {summary['idempotent_reruns']} re-runs"
    )
    asyncio.run(check_with_helpers(tmp_path / "chaos.db"))


async def check_with_helpers(db: Path) -> None:
    """Every thread's history obeys the structural rules; each turn's text is there once, in order."""
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        status = await store.status()
        assert status.threads_leased == 0 and sum(status.backlog_by_priority.values()) == 0
        assert status.outbox_by_status.get("pending", 0) == status.outbox_by_status.get("running", 0) == 0
        children = 0
        for index, thread_id in enumerate(thread_ids(THREADS)):
            thread = await store.get_thread(thread_id)
            messages = await all_messages(store, thread_id)
            report = check_history(messages, last_seq=thread.last_seq)
            expected = []
            for turn in range(TURNS):
                expected.append(f"{thread_id} turn {turn}")
                if has_follow_up(index):
                    expected.append(f"{thread_id} turn {turn} follow-up")
            assert [c for c in report.user_contents if " turn " in c] == expected
            for m in messages:
                for call in m.tool_calls:
                    if call.name == "spawn_thread":
                        child = await all_messages(store, f"{thread_id}/{call.id}")
                        check_history(child)
                        children += 1
        assert children > 0
    finally:
        await store.close()
