"""kill -9 around waits for a person, on SQLite: between the request and the decision,
during the decisions, after approval before the outbox ran the call. Afterwards every
approved call ran exactly once (its non-idempotent tool counts its runs), no denied call
ran, every wait is decided and every tool call of every history answered once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import apsw

from dormant.records import NewInput
from dormant.store.sqlite import SQLiteStore
from tests.faults.conftest import Workers
from tests.helpers import all_messages, check_history

THREADS = 24
MODULE = "tests.faults.approval_worker"


def query(db: Path, statement: str) -> list[tuple[Any, ...]]:
    conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return list(conn.execute(statement).fetchall())
    finally:
        conn.close()


def wait_for(db: Path, statement: str, want: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if db.exists() and query(db, statement)[0][0] == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"{statement} never gave {want!r} (last {query(db, statement)})")


def kill(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def runs_of(path: Path) -> Counter[str]:
    return Counter(line.split()[0] for line in path.read_text().splitlines()) if path.exists() else Counter()


async def seed(url: str) -> None:
    store = SQLiteStore(url)
    await store.open()
    try:
        items = [
            NewInput(thread_id=f"t{n}", kind="user", dedup_key="k", content="refund", agent="a")
            for n in range(THREADS)
        ]
        await store.admit(items)
    finally:
        await store.close()


async def final_checks(url: str) -> None:
    store = SQLiteStore(url)
    await store.open()
    try:
        for n in range(THREADS):
            history = await all_messages(store, f"t{n}")
            check_history(history)
            tools = [m for m in history if m.role == "tool"]
            assert len(tools) == 1, f"t{n}: {[m.content for m in tools]}"
            if n % 2:
                assert "denied by ann" in tools[0].content
            else:
                assert tools[0].content == "refunded 7"
    finally:
        await store.close()


def test_kill_9_at_each_step_of_an_approval(tmp_path: Path, workers: Workers) -> None:
    db, runs = tmp_path / "a.db", tmp_path / "runs.txt"
    url = f"sqlite:///{db}"
    asyncio.run(seed(url))
    # 1. between the request and the decision: the worker committed every wait, then dies
    worker = workers.start_module(MODULE, "run", url, str(runs))
    wait_for(db, "SELECT count(*) FROM approvals WHERE status = 'requested'", THREADS)
    kill(worker)
    assert query(db, "SELECT count(*) FROM outbox")[0][0] == 0
    # 2. during the decisions: the decider is killed part way, a second one finishes
    decider = workers.start_module(MODULE, "decide", url, str(runs))
    assert decider.stdout is not None
    for _ in range(THREADS // 3):
        assert decider.stdout.readline().startswith(("decided", "done"))
    kill(decider)
    decided = query(db, "SELECT count(*) FROM approvals WHERE status <> 'requested'")[0][0]
    assert 0 < decided <= THREADS
    again = workers.start_module(MODULE, "decide", url, str(runs))
    out, errors = again.communicate(timeout=60)
    assert again.returncode == 0 and out.rstrip().endswith("done"), errors[-2000:]
    statuses: dict[str, int] = dict(query(db, "SELECT status, count(*) FROM approvals GROUP BY status"))
    assert statuses == {"approved": THREADS // 2, "denied": THREADS // 2}
    assert query(db, "SELECT count(*) FROM outbox WHERE status = 'pending'")[0][0] == THREADS // 2
    assert runs_of(runs) == Counter(), "nothing runs before a worker takes the outbox"
    # 3. after approval, before the outbox ran the calls: a worker dies as it starts
    worker = workers.start_module(MODULE, "run", url, str(runs))
    assert worker.stdout is not None and worker.stdout.readline().strip() == "running"
    kill(worker)
    worker = workers.start_module(MODULE, "run", url, str(runs))
    wait_for(db, "SELECT count(*) FROM messages WHERE role = 'assistant' AND content LIKE 'saw %'", THREADS)
    kill(worker)
    unknown = query(db, "SELECT count(*) FROM outbox WHERE status = 'unknown'")[0][0]
    assert unknown == 0, "a call killed mid-run would be 'unknown' (not re-run): none was running here"
    counted = runs_of(runs)
    assert counted == Counter({f"t{n}": 1 for n in range(0, THREADS, 2)}), counted
    asyncio.run(final_checks(url))
