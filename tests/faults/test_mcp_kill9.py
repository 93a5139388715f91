"""kill -9 of a worker during long-running MCP calls: the idempotent call runs again, the
other is answered "outcome unknown"; neither is lost, neither is answered twice."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from dormant import Agent, Runtime, ScriptedModel
from dormant.store.sqlite import SQLiteStore
from tests.faults.conftest import Workers
from tests.faults.mcp_worker import script, servers
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings
from tests.mcp_servers import everything_js


async def running_calls(db: Path) -> int:
    store = SQLiteStore(f"sqlite:///{db}")
    await store.open()
    try:
        return sum(1 for e in (await store.list_outbox()).items if e.status == "running")
    finally:
        await store.close()


@pytest.mark.timeout(120)
async def test_kill_9_during_mcp_calls_reruns_the_idempotent_one_and_never_the_other(
    tmp_path: Path, workers: Workers
) -> None:
    entry = str(everything_js())
    db = tmp_path / "mcp.db"
    calls_log = tmp_path / "calls.log"
    proc = workers.start_module("tests.faults.mcp_worker", str(db), str(tmp_path), entry)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists() and calls_log.exists() and await running_calls(db) == 2:
            break
        await asyncio.sleep(0.1)
    assert proc.poll() is None, proc.communicate()
    await asyncio.sleep(1.0)  # both calls are well under way on their servers
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    assert calls_log.read_text().split()[0] == "slow"

    agent = Agent(name="a", model=ScriptedModel(script), mcp=servers(tmp_path, entry))
    async with Runtime(f"sqlite:///{db}", [agent], settings=fast_settings()) as rt:
        await rt.run_until_idle(timeout=60)
        long = await all_messages(rt.store, "long")
        pay = await all_messages(rt.store, "pay")
    for history in (long, pay):
        check_history(history)  # every call answered exactly once
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    # idempotentHint: run again by the new worker, to completion
    assert not long[2].content.startswith("error:") and "completed" in long[2].content.lower()
    # no hint: never re-run, answered "outcome unknown"
    assert pay[2].content.startswith("outcome unknown: this tool call was interrupted"), pay[2].content
    assert len(calls_log.read_text().splitlines()) == 1
