"""Full disk and locks: admission fails with a clear error, nothing acknowledged is lost,
the runtime keeps running through store failures and resumes by itself once space or
the lock frees. A damaged database stops it with a message that says what to do."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Collection, Sequence
from pathlib import Path

import apsw
import pytest

from dormant import (
    Admission,
    Agent,
    ModelReply,
    ModelRequest,
    Runtime,
    SchemaError,
    ScriptedModel,
    StoreFull,
    StoreLocked,
    ToolCall,
)
from dormant.models.scripted import echo_script
from dormant.records import Claim, CommitPlan, OutboxEntry, OutboxOutcome
from dormant.store.sqlite import SQLiteStore
from dormant.tools.spec import tool
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings


def page_count(db: Path) -> int:
    conn = apsw.Connection(str(db))
    try:
        row = conn.execute("PRAGMA page_count").fetchone()
        assert row is not None
        return int(row[0])
    finally:
        conn.close()


def call(name: str) -> ToolCall:
    """A model's call of tool ``name`` without arguments."""
    return ToolCall(id="c", name=name, arguments="{}")


async def check_all_recorded(rt: Runtime, acked: Sequence[Admission]) -> None:
    """Every acknowledged input became exactly one message; no thread failed; nothing pending."""
    by_thread: dict[str, set[int]] = {}
    for a in acked:
        by_thread.setdefault(a.thread_id, set()).add(a.input_id)
    for thread_id, ids in by_thread.items():
        messages = await all_messages(rt.store, thread_id)
        report = check_history(messages)
        assert ids <= set(report.input_ids), f"{thread_id}: acknowledged inputs missing"
        thread = await rt.thread(thread_id)
        assert (thread.status, thread.failures) == ("active", 0), (
            "the store's trouble is not the thread's fault"
        )
    status = await rt.status()
    assert status.threads_by_status.get("failed", 0) == 0
    assert sum(status.backlog_by_priority.values()) == 0


async def idle(rt: Runtime) -> bool:
    return not rt.scheduler.active and not rt.dispatcher.active and not await rt.store.has_work()


async def test_a_full_disk_refuses_admission_loses_nothing_and_work_resumes(tmp_path: Path) -> None:
    db = tmp_path / "full.db"
    store = SQLiteStore(f"sqlite:///{db}")
    reply = ModelReply(text="y" * 3000)  # commits need pages too
    agent = Agent(name="a", model=ScriptedModel(lambda request: reply))
    async with Runtime(store, [agent], settings=fast_settings(lease_s=2.0)) as rt:
        runner = asyncio.create_task(rt.run())
        await store.set_max_page_count(page_count(db) + 6)  # about 100 KB left on the "disk"
        acked: list[Admission] = []
        refused: list[int] = []
        for i in range(200):
            try:
                acked.append(await rt.send(f"t{i % 7}", f"{i} " + "x" * 4000, key=f"k{i}"))
            except StoreFull as exc:
                assert "full" in str(exc)
                refused.append(i)
        assert acked and len(refused) > 100, "the disk filled up and admission said so"
        await asyncio.sleep(0.3)
        assert not runner.done(), "the runtime keeps running on a full disk"
        assert rt.stats.slice_failures > 0, "commits were refused too"
        assert (await rt.status()).threads_by_status.get("failed", 0) == 0

        await store.set_max_page_count(None)  # space is freed
        for i in refused:  # the client retries what was not acknowledged
            acked.append(await rt.send(f"t{i % 7}", f"{i} " + "x" * 4000, key=f"k{i}"))
        await eventually(lambda: idle(rt), timeout=20)
        assert not runner.done()
        rt.stop()
        await runner
        await check_all_recorded(rt, acked)
        assert len({(a.thread_id, a.input_id) for a in acked}) == 200
    conn = apsw.Connection(str(db))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


LOCK_HOLDER = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


@pytest.mark.timeout(60)
async def test_a_database_locked_by_another_process_refuses_admission_then_resumes(tmp_path: Path) -> None:
    db = tmp_path / "locked.db"
    store = SQLiteStore(f"sqlite:///{db}", busy_timeout_ms=200)
    gate = asyncio.Event()

    @tool(mode="async")
    async def wait_for_gate(ctx: object = None) -> str:
        """Finishes when the test opens the gate."""
        await gate.wait()
        return "through"

    def script(request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(call("wait_for_gate"),))
        return echo_script(request)

    agent = Agent(name="a", model=ScriptedModel(script), tools=[wait_for_gate])
    async with Runtime(store, [agent], settings=fast_settings(lease_s=1.0)) as rt:
        runner = asyncio.create_task(rt.run())
        acked = [await rt.send(f"t{i}", f"before {i}", key="k1") for i in range(8)]

        async def calls_running() -> bool:
            return len((await store.list_outbox(status="running")).items) == 8

        await eventually(calls_running)
        holder = await asyncio.create_subprocess_exec(
            sys.executable, "-c", LOCK_HOLDER, str(db), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            assert holder.stdout is not None and await holder.stdout.readline() == b"locked\n"
            with pytest.raises(StoreLocked, match="locked"):
                await rt.send("t0", "during the lock", key="k2")
            gate.set()  # the tools finish now, but their results cannot be recorded yet
            await asyncio.sleep(0.6)
            assert not runner.done(), "the runtime keeps running while the file is locked"
            assert rt.dispatcher.active == 8, "outcomes are kept and recorded again"
        finally:
            await asyncio.wait_for(holder.communicate(b"\n"), timeout=10)
        acked.append(await rt.send("t0", "after the lock", key="k2"))
        await eventually(lambda: idle(rt), timeout=20)
        rt.stop()
        await runner
        await check_all_recorded(rt, acked)
        for i in range(8):
            contents = [m.content for m in await all_messages(rt.store, f"t{i}") if m.role == "tool"]
            calls = 2 if i == 0 else 1
            assert contents == ["through"] * calls, "each call ran once and its real result was recorded"


class FlakyStore(SQLiteStore):
    """A memory store whose operations fail the first ``n`` times each, in assorted ways:
    StoreLocked, StoreFull and (where a loop must survive a bug) a plain RuntimeError."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.left = {"claim_threads": n, "claim_outbox": n, "commit_slice": n, "finish_outbox": n, "renew": n}
        self.raised = 0

    def _maybe_fail(self, name: str, *, bugs: bool = True) -> None:
        if self.left[name] <= 0:
            return
        self.left[name] -= 1
        self.raised += 1
        if bugs and self.left[name] % 3 == 0:
            raise RuntimeError(f"{name}: a bug, not a store condition")
        if self.left[name] % 2:
            raise StoreLocked(f"{name}: locked")
        raise StoreFull(f"{name}: full")

    async def claim_threads(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        agents: Collection[str] | None = None,
        tenant_slices: int = 0,
    ) -> list[Claim]:
        self._maybe_fail("claim_threads")
        return await super().claim_threads(worker, limit, lease_s, agents=agents, tenant_slices=tenant_slices)

    async def claim_outbox(
        self,
        worker: str,
        limit: int,
        lease_s: float,
        *,
        tools: Collection[tuple[str, str]] | None = None,
    ) -> list[OutboxEntry]:
        self._maybe_fail("claim_outbox")
        return await super().claim_outbox(worker, limit, lease_s, tools=tools)

    async def commit_slice(self, plan: CommitPlan) -> None:
        self._maybe_fail("commit_slice", bugs=False)  # a bug here would count as the thread's failure
        await super().commit_slice(plan)

    async def finish_outbox(self, outcomes: Sequence[OutboxOutcome]) -> list[bool]:
        self._maybe_fail("finish_outbox", bugs=False)  # a bug here leaves the call to reconciliation
        return await super().finish_outbox(outcomes)

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        self._maybe_fail("renew")
        return await super().renew_leases(claims, lease_s)


async def test_the_loops_survive_store_failures_and_bugs() -> None:
    @tool(mode="async")
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    def script(request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(call("ping"),))
        return ModelReply(text="got " + request.messages[-1].content)

    store = FlakyStore(n=7)
    agent = Agent(name="a", model=ScriptedModel(script), tools=[ping])
    async with Runtime(store, [agent], settings=fast_settings(lease_s=0.3)) as rt:
        acked = [await rt.send(f"t{i}", "hello", key="k1") for i in range(5)]
        await rt.run_until_idle(timeout=30)
        assert store.raised >= 20
        await check_all_recorded(rt, acked)
        for i in range(5):
            assert [m.content for m in await all_messages(rt.store, f"t{i}")][-1] == "got pong"


class DamagedStore(SQLiteStore):
    """A memory store that reports a damaged database once ``broken`` is set."""

    broken = False

    async def commit_slice(self, plan: CommitPlan) -> None:
        if self.broken:
            raise SchemaError("the database file is damaged (database disk image is malformed)")
        await super().commit_slice(plan)


async def test_a_damaged_database_stops_the_runtime_with_what_to_do() -> None:
    store = DamagedStore()
    async with Runtime(
        store, [Agent(name="a", model=ScriptedModel(echo_script))], settings=fast_settings()
    ) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=10)
        store.broken = True
        await rt.send("t1", "again", key="k2")
        with pytest.raises(SchemaError) as caught:
            await rt.run_until_idle(timeout=10)
        message = str(caught.value)
        assert "damaged" in message and "dormant stopped" in message
        assert "dormant doctor --store memory://" in message and "backup" in message
