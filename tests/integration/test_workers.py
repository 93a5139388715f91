"""Several worker processes on one PostgreSQL database: 1,000 threads x 5 turns, one
worker killed with SIGKILL mid-run; every input is consumed exactly once, in order,
and the surviving workers finish the dead worker's threads once its leases expire."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from dormant.records import NewInput
from dormant.store.postgres import PostgresStore
from tests.helpers import all_messages, check_history, eventually

REPO = Path(__file__).resolve().parents[2]
THREADS = 1000
TURNS = 5
WORKERS = 3
LEASE_S = 2.0
KILL_IN_TURN = 2


def start_worker(url: str, worker_id: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.environ.get("PYTHONPATH"), str(REPO)) if p)
    return subprocess.Popen(
        [sys.executable, "-m", "tests.integration.pg_worker", url, worker_id, str(LEASE_S)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def leases_of(url: str, worker_id: str) -> list[str]:
    """Threads ``worker_id`` holds a lease on right now."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT id FROM threads WHERE lease_owner = %s", (worker_id,)).fetchall()
    return [r[0] for r in rows]


@pytest.mark.slow
@pytest.mark.timeout(240)
async def test_three_workers_one_killed_lose_and_double_nothing(pg_url: str) -> None:
    threads = [f"t{i:04d}" for i in range(THREADS)]
    admitted: dict[str, list[int]] = {t: [] for t in threads}
    store = PostgresStore(pg_url)
    await store.open()  # creates the schema before the workers race to
    procs = {f"worker-{n}": start_worker(pg_url, f"worker-{n}") for n in range(WORKERS)}
    victim = "worker-0"
    orphaned: list[str] = []
    try:
        for n in range(TURNS):
            batch = [
                NewInput(thread_id=t, kind="user", dedup_key=f"turn{n}", content=f"{t} turn {n}", agent="a")
                for t in threads
            ]
            for adm in await store.admit(batch):
                assert not adm.duplicate
                admitted[adm.thread_id].append(adm.input_id)
            if n == KILL_IN_TURN:
                deadline = time.monotonic() + 60
                while not orphaned and time.monotonic() < deadline:
                    orphaned = leases_of(pg_url, victim)
                assert orphaned, "the victim never held a lease"
                procs[victim].kill()  # SIGKILL: no cleanup, leases and running calls stay behind
                procs[victim].wait(timeout=10)
                assert procs[victim].returncode == -signal.SIGKILL

            async def idle() -> bool:
                return not await store.has_work()

            await eventually(idle, timeout=120, interval=0.05)

        for worker_id, proc in procs.items():
            if worker_id != victim:
                assert proc.poll() is None, f"{worker_id} died: {proc.communicate()}"
                proc.send_signal(signal.SIGTERM)
        for worker_id, proc in procs.items():
            out, err = proc.communicate(timeout=30)
            if worker_id != victim:
                assert proc.returncode == 0, err
                assert "STOPPED" in out
                assert int(out.split("slices=")[1].split()[0]) > 0, f"{worker_id} did no work"

        status = await store.status()
        assert status.threads_by_status == {"active": THREADS}
        assert status.threads_leased == 0
        assert sum(status.backlog_by_priority.values()) == 0, "every input consumed"
        assert status.outbox_by_status == {}, "every call answered and gone"
        assert status.messages == THREADS * TURNS * 4
        # every thread, the ones the dead worker held leases on (``orphaned``) included
        for thread_id in threads:
            thread = await store.get_thread(thread_id)
            assert (thread.awaiting, thread.status) == (0, "active")
            messages = await all_messages(store, thread_id)
            report = check_history(messages, last_seq=thread.last_seq)
            assert report.user_contents == [f"{thread_id} turn {n}" for n in range(TURNS)]
            assert [m.input_id for m in messages if m.role == "user"] == admitted[thread_id]
            assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"] * TURNS
            assert all(m.content.startswith("found x") for m in messages if m.role == "tool")
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        await store.close()
