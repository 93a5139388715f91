"""Two worker processes on one SQLite file: leases keep every thread single-flight and
in order; one is killed mid-slice and the other finishes its threads once the dead
worker is proven dead (its lock file is free), long before its 30 s leases expire, and
never while it ran them. And processes that open the same new file at the same instant
all get in."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

import pytest

from dormant.records import NewInput
from dormant.store.sqlite import SQLiteStore
from tests.faults.conftest import Workers
from tests.faults.worker import OPEN_ROUNDS
from tests.helpers import all_messages, check_history

THREADS = 16
ROUNDS = 10


def calls(log: Path) -> list[tuple[str, str, str, float]]:
    """(enter|exit, worker, thread, time) lines of the model-call log."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((parts[0], parts[1], parts[2], float(parts[3])))
    return out


def open_calls(log: Path, worker: str) -> set[str]:
    """Threads whose model call by ``worker`` entered and never exited."""
    entered: dict[str, int] = defaultdict(int)
    for kind, who, thread, _ in calls(log):
        if who == worker:
            entered[thread] += 1 if kind == "enter" else -1
    return {t for t, n in entered.items() if n > 0}


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_workers_share_one_file_and_the_survivor_takes_over(tmp_path: Path, workers: Workers) -> None:
    db = tmp_path / "shared.db"
    log = tmp_path / "calls.log"
    asyncio.run(init(db))
    survivor = workers.start("serve", str(db), str(tmp_path), "B")
    victim = workers.start("serve", str(db), str(tmp_path), "A")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready = (tmp_path / "ready.log").read_text().split() if (tmp_path / "ready.log").exists() else []
        if sorted(ready) == ["A", "B"]:
            break
        time.sleep(0.02)
    else:
        pytest.fail(f"workers did not start: {victim.poll()} {survivor.poll()}")

    killed_at = 0.0
    held: set[str] = set()
    for round_ in range(ROUNDS):
        asyncio.run(admit(db, round_))
        time.sleep(0.05)
        if round_ >= 4 and not killed_at:
            # kill A while it is inside a model call, so it dies holding leases
            until = time.monotonic() + 10
            while not open_calls(log, "A") and time.monotonic() < until:
                time.sleep(0.001)
            os.kill(victim.pid, signal.SIGKILL)
            killed_at = time.time()
            victim.wait(timeout=10)
            held = open_calls(log, "A")
    assert killed_at and held, "A was killed in the middle of a slice"

    asyncio.run(wait_idle(db, timeout=30))
    (tmp_path / "stop").touch()
    _, err = survivor.communicate(timeout=30)
    assert survivor.returncode == 0, err

    lines = calls(log)
    workers_seen = {who for _, who, _, at in lines if at < killed_at}
    assert workers_seen == {"A", "B"}, "both workers ran slices before the kill"
    # single flight: per thread, no two model calls overlap, across both processes;
    # the call A never finished counts as running until A died
    spans: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    started: dict[tuple[str, str], float] = {}
    for kind, who, thread, at in lines:
        if kind == "enter":
            started[(who, thread)] = at
        else:
            spans[thread].append((started.pop((who, thread)), at, who))
    for (who, thread), at in started.items():
        assert who == "A", "only the killed worker left a call unfinished"
        spans[thread].append((at, killed_at, who))
    for thread, intervals in spans.items():
        intervals.sort()
        for (_, end, who), (begin, _, next_who) in itertools.pairwise(intervals):
            assert begin >= end, f"{thread}: a {next_who} slice started while a {who} slice ran"
    # the survivor took over A's threads (at once: A's lock file proves it dead, see
    # tests/faults/test_sqlite_kill_recovery.py), never while A ran them (the spans above)
    for thread in held:
        after = [
            at
            for kind, who, t, at in lines
            if kind == "enter" and who == "B" and t == thread and at > killed_at
        ]
        assert after, f"B never finished {thread}"
        assert min(after) - killed_at < 15.0, f"B took {thread} only at {min(after) - killed_at:.1f}s"

    asyncio.run(check_histories(db))


async def init(db: Path) -> None:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    await store.close()


async def admit(db: Path, round_: int) -> None:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        await store.admit(
            [
                NewInput(
                    thread_id=f"w{t:02d}",
                    kind="user",
                    dedup_key=f"m{round_}",
                    content=f"m{round_}",
                    agent="a",
                )
                for t in range(THREADS)
            ]
        )
    finally:
        await store.close()


async def wait_idle(db: Path, timeout: float) -> None:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        async with asyncio.timeout(timeout):
            while await store.has_work():  # noqa: ASYNC110 - another process does the work
                await asyncio.sleep(0.05)
    finally:
        await store.close()


async def check_histories(db: Path) -> None:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        for t in range(THREADS):
            thread_id = f"w{t:02d}"
            messages = await all_messages(store, thread_id)
            report = check_history(messages)
            assert report.user_contents == [f"m{r}" for r in range(ROUNDS)], "admission order, each once"
            assert report.input_ids == sorted(report.input_ids)
            thread = await store.get_thread(thread_id)
            assert (thread.status, thread.awaiting) == ("active", 0)
        status = await store.status()
        assert status.threads_leased == 0 and sum(status.backlog_by_priority.values()) == 0
    finally:
        await store.close()


def test_processes_opening_the_same_new_file_at_once_all_get_in(tmp_path: Path, workers: Workers) -> None:
    start_at = f"{time.time() + 1.5:.3f}"
    procs = [workers.start("open-race", "-", str(tmp_path), start_at) for _ in range(3)]
    for proc in procs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    results = (tmp_path / "opens.log").read_text().splitlines()
    assert len(results) == 3 * OPEN_ROUNDS
    assert [r for r in results if not r.endswith(" ok")] == [], (
        "switching a new file to WAL must wait, not fail"
    )
