"""kill -9 in the middle of a run, three times, then run to completion: nothing lost,
nothing doubled, the database intact."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import apsw
import pytest

from dormant.inbox import UNKNOWN_OUTCOME
from dormant.store.sqlite import SQLiteStore
from tests.helpers import all_messages, check_history

REPO = Path(__file__).resolve().parents[2]
THREADS = 60
TURNS = 4
KILLS = 3
MESSAGES = THREADS * TURNS * 4  # user, assistant (call), tool, assistant per turn


def count_messages(db: Path) -> int:
    """Messages committed so far (0 before the schema exists)."""
    if not db.exists():
        return 0
    try:
        conn = apsw.Connection(str(db), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.setbusytimeout(1000)
            row = conn.execute("SELECT COUNT(*) FROM messages").fetchone()
            return int(row[0]) if row else 0
        finally:
            conn.close()
    except apsw.Error:
        return 0


def start(db: Path, effects: Path) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p),
    }
    env = {k: v for k, v in env.items() if not k.startswith("DORMANT_")}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.faults.workload", str(db), str(effects), str(THREADS), str(TURNS)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_kill_9_and_restart_loses_and_doubles_nothing(tmp_path: Path) -> None:
    db = tmp_path / "kill.db"
    effects = tmp_path / "effects.log"
    progress: list[int] = []
    for kill in range(KILLS):
        before = count_messages(db)
        target = before + MESSAGES // (KILLS + 2)
        proc = start(db, effects)
        deadline = time.monotonic() + 30
        while count_messages(db) < target and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc.poll() is None, f"the workload ended before kill {kill + 1}: {proc.communicate()}"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        assert proc.returncode == -signal.SIGKILL
        progress.append(count_messages(db))
    assert progress == sorted(progress) and progress[-1] < MESSAGES, f"kills landed mid-run: {progress}"

    final = start(db, effects)
    out, err = final.communicate(timeout=90)
    assert final.returncode == 0, err
    assert "COMPLETE" in out

    asyncio.run(verify(db, effects))


async def verify(db: Path, effects: Path) -> None:
    conn = apsw.Connection(str(db))
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()

    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        status = await store.status()
        assert status.threads_by_status == {"active": THREADS}
        assert status.outbox_by_status.get("pending", 0) == 0
        assert status.outbox_by_status.get("running", 0) == 0
        assert status.threads_leased == 0
        assert sum(status.backlog_by_priority.values()) == 0, "every input consumed"
        ran = Counter(effects.read_text().split())
        assert all(n == 1 for n in ran.values()), f"a non-idempotent call ran twice: {ran.most_common(3)}"
        unknown = 0
        for i in range(THREADS):
            thread_id = f"t{i:03d}"
            thread = await store.get_thread(thread_id)
            assert (thread.awaiting, thread.status) == (0, "active")
            messages = await all_messages(store, thread_id)
            report = check_history(messages, last_seq=thread.last_seq)
            assert report.user_contents == [f"{thread_id} turn {n}" for n in range(TURNS)]
            assert report.tool_calls == TURNS
            assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"] * TURNS
            for m in messages:
                if m.role != "tool" or m.name != "charge":
                    continue
                assert m.tool_call_id is not None
                if m.content == UNKNOWN_OUTCOME:
                    unknown += 1  # interrupted: it may or may not have run, but at most once
                else:
                    assert m.content.startswith("charged") and ran[m.tool_call_id] == 1
    finally:
        await store.close()
    print(f"kill -9 test: {unknown} charge calls ended with an unknown outcome")
