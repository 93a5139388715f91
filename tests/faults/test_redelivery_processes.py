"""Redelivery across processes: two processes on one SQLite file each deliver every
input three times, from several tasks at once, while both run slices. Each input
is admitted once, recorded once and handled (a non-idempotent effect) once."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from dormant.store.sqlite import SQLiteStore
from tests.faults.conftest import Workers
from tests.faults.worker import COPIES, REDELIVER_INPUTS, REDELIVER_THREADS, redeliver_items
from tests.helpers import all_messages, check_history


@pytest.mark.timeout(120)
def test_every_input_delivered_three_times_from_two_processes_has_one_effect(
    tmp_path: Path, workers: Workers
) -> None:
    db = tmp_path / "shared.db"
    start_at = f"{time.time() + 2.0:.3f}"  # after both have started and opened the store
    procs = [workers.start("redeliver", str(db), str(tmp_path), start_at) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0 and "DONE" in out, err

    logs = sorted(tmp_path.glob("admissions-*.log"))
    assert len(logs) == 2, "both processes admitted"
    keys = {(item.thread_id, item.dedup_key) for item in redeliver_items()}
    admissions = []
    for log in logs:
        lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
        delivered = Counter((thread_id, key) for thread_id, key, _, _ in lines)
        assert set(delivered) == keys and min(delivered.values()) >= COPIES, "each process delivered all 3x+"
        admissions.extend(lines)
    ids: dict[tuple[str, str], set[int]] = {}
    fresh: Counter[tuple[str, str]] = Counter()
    for thread_id, key, input_id, duplicate in admissions:
        ids.setdefault((thread_id, key), set()).add(int(input_id))
        fresh[(thread_id, key)] += duplicate == "0"
    assert set(ids) == keys
    assert all(len(v) == 1 for v in ids.values()), "every copy, in both processes, names one input"
    assert all(fresh[k] == 1 for k in keys), "exactly one of the six deliveries is new"

    effects = Counter((tmp_path / "effects.log").read_text().split("\n"))
    effects.pop("", None)
    expected = {f"r{t} message_{i}" for t in range(REDELIVER_THREADS) for i in range(REDELIVER_INPUTS)}
    assert set(effects) == expected, "every input was handled"
    assert all(n == 1 for n in effects.values()), f"handled twice: {effects.most_common(3)}"

    async def check_store() -> None:
        store = SQLiteStore(f"sqlite:///{db}")
        await store.open()
        try:
            for t in range(REDELIVER_THREADS):
                messages = await all_messages(store, f"r{t}")
                report = check_history(messages)
                assert sorted(report.user_contents) == sorted(f"message {i}" for i in range(REDELIVER_INPUTS))
                assert set(report.input_ids) >= {next(iter(ids[(f"r{t}", f"msg-{i}")])) for i in range(5)}
            status = await store.status()
            assert sum(status.backlog_by_priority.values()) == 0
            assert status.outbox_by_status == {}
        finally:
            await store.close()

    asyncio.run(check_store())
