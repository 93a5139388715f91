"""kill -9 on SQLite: the threads and calls a killed worker held are free
again at once, proven dead by its worker lock file (see dormant.store.sqlite.owners),
not after their lease (60 s here); a live worker's leases are never taken."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

from dormant.records import CommitPlan, Message, NewCall, NewInput, ViewLimits
from dormant.store.sqlite import SQLiteStore
from tests.faults.conftest import REPO, worker_env

THREADS = 20
LEASE_S = 60.0
#: The child claims every ready thread and outbox call, says how many, then holds them.
CHILD = f"""
import asyncio, sys
from dormant.store.sqlite import SQLiteStore

async def main(url):
    store = SQLiteStore(url)
    await store.open()
    threads = await store.claim_threads("victim", 1000, {LEASE_S})
    calls = await store.claim_outbox("victim", 1000, {LEASE_S})
    print(len(threads), len(calls), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main(sys.argv[1]))
"""


async def start_child(url: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, url, cwd=REPO, env=worker_env(), stdout=asyncio.subprocess.PIPE
    )


async def test_the_leases_of_a_killed_worker_are_free_at_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kill.db"
    store = SQLiteStore(url)
    await store.open()
    # one open call (idempotent) of a thread that awaits it: the child will be running it
    await store.admit([NewInput(thread_id="caller", kind="user", dedup_key="k", content="x", agent="a")])
    (claim,) = await store.claim_threads("setup", 1, LEASE_S)
    load = await store.load_slice(claim, ViewLimits())
    await store.commit_slice(
        CommitPlan(
            thread_id="caller",
            token=claim.token,
            consumed=tuple(i.id for i in load.inputs),
            messages=(Message(seq=1, role="user", content="x"),),
            calls=(NewCall(call_id="c1", tool="sync", arguments="{}", idempotent=True),),
            awaiting=1,
        )
    )
    await store.admit(
        [
            NewInput(thread_id=f"t{i}", kind="user", dedup_key="k", content="x", agent="a")
            for i in range(THREADS)
        ]
    )
    await store.close()

    child = await start_child(url)
    store = SQLiteStore(url)
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), timeout=30)
        assert line.split() == [str(THREADS).encode(), b"1"], "the child holds every thread and the call"
        await store.open()
        await asyncio.sleep(0.5)
        assert await store.claim_threads("rescuer", 1000, LEASE_S) == [], "a live worker keeps its leases"
        assert await store.claim_outbox("rescuer", 10, LEASE_S) == []
        killed = time.monotonic()
        os.kill(child.pid, signal.SIGKILL)
        await child.wait()
        claimed = 0
        while claimed < THREADS and time.monotonic() - killed < 20:
            claimed += len(await store.claim_threads("rescuer", 1000, LEASE_S))
            await asyncio.sleep(0.05)
        took = time.monotonic() - killed
        assert claimed == THREADS, f"{claimed} of {THREADS} threads back after {took:.1f} s"
        assert took < 1.0, f"took {took:.2f} s"
        calls = await store.claim_outbox("rescuer", 10, LEASE_S)
        assert [(c.call_id, c.attempts) for c in calls] == [("c1", 2)], "the idempotent call runs again"
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
        await store.close()


async def test_a_store_opened_after_the_kill_frees_the_leases_as_it_opens(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/kill.db"
    store = SQLiteStore(url)
    await store.open()
    await store.admit([NewInput(thread_id="t", kind="user", dedup_key="k", content="x", agent="a")])
    await store.close()
    child = await start_child(url)
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), timeout=30)
    assert line.split() == [b"1", b"0"]
    child.kill()
    await child.wait()
    store = SQLiteStore(url)
    await store.open()
    try:
        assert len(await store.claim_threads("next", 10, LEASE_S)) == 1
    finally:
        await store.close()
    assert not list(Path(f"{tmp_path}/kill.db.workers").glob("*.lock")), "no lock file is left behind"
