"""Sync tools in a bounded pool: a timed-out sync call that may still act
is "outcome unknown", never "timed out"; the threads hung calls hold are bounded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from dormant.agent import Agent
from dormant.metrics import RuntimeStats
from dormant.models.scripted import echo_model
from dormant.records import OutboxEntry
from dormant.slices.dispatcher import Dispatcher
from dormant.store.sqlite import SQLiteStore
from dormant.tools.pool import SyncCall, ToolThreads
from dormant.tools.spec import ToolContext, tool
from tests.helpers import FakeClock, eventually

release = threading.Event()


@pytest.fixture(autouse=True)
def _let_hung_calls_end() -> Iterator[None]:
    release.clear()
    yield
    release.set()


@tool(mode="async", timeout=0.1)
def charge_card(amount: int) -> str:
    """A sync, non-idempotent tool that hangs (a slow payment API)."""
    release.wait(10)
    return f"charged {amount}"


def dispatcher(pool: ToolThreads) -> Dispatcher:
    return Dispatcher(
        SQLiteStore("memory://", clock=FakeClock()),
        {"a": Agent(name="a", model=echo_model(), tools=[charge_card])},
        RuntimeStats(),
        worker="w",
        concurrency=4,
        max_attempts=3,
        retry_base_s=0.5,
        retry_max_s=8.0,
        poll_s=0.01,
        max_result_bytes=4096,
        clock=FakeClock(),
        on_result=lambda: None,
        tool_threads=pool,
    )


def entry(call_id: str) -> OutboxEntry:
    return OutboxEntry(
        id=1,
        thread_id="t1",
        agent="a",
        call_id=call_id,
        tool="charge_card",
        arguments='{"amount": 5}',
        status="running",
        attempts=1,
        idempotent=False,
        token="tok",
    )


async def test_a_timed_out_running_sync_call_is_outcome_unknown_not_timed_out() -> None:
    pool = ToolThreads(2)
    try:
        outcome = await dispatcher(pool).execute(entry("c1"))
        assert (outcome.kind, outcome.is_error) == ("done", True), "not re-run: it may have charged"
        assert "outcome unknown" in outcome.content and "timed out" not in outcome.content
        assert pool.busy == 1, "the call still holds its thread"
    finally:
        pool.close()


async def test_a_sync_call_that_never_got_a_thread_did_not_run_and_is_retried() -> None:
    pool = ToolThreads(1)
    d = dispatcher(pool)
    try:
        first = await d.execute(entry("c1"))  # holds the only thread
        assert "outcome unknown" in first.content
        second = await d.execute(entry("c2"))
        assert second.kind == "retry", "it never ran, so running it later is safe"
        assert second.error is not None and "did not run" in second.error
        assert pool.busy == 1
    finally:
        pool.close()


async def test_the_pool_never_holds_more_threads_than_its_size() -> None:
    pool = ToolThreads(3)
    before = threading.active_count()
    progress = [SyncCall() for _ in range(10)]
    calls = [asyncio.ensure_future(pool.call(release.wait, {"timeout": 10}, p)) for p in progress]
    try:

        async def three_busy() -> bool:
            return pool.busy == 3

        await eventually(three_busy)
        await asyncio.sleep(0.05)
        assert pool.busy == 3 and sum(p.started for p in progress) == 3
        assert threading.active_count() - before <= 3
        release.set()
        assert all(await asyncio.gather(*calls))
        assert all(p.finished for p in progress)
    finally:
        release.set()
        pool.close()


async def test_a_sync_tool_runs_in_the_contexts_pool() -> None:
    pool = ToolThreads(1)
    ctx = ToolContext(thread_id="t", call_id="c", agent="a", tool_threads=pool)
    release.set()
    try:
        assert await charge_card.run({"amount": 1}, ctx) == "charged 1"
        assert ctx.sync_call is not None and ctx.sync_call.finished and not ctx.sync_call.running
    finally:
        pool.close()


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError):
        ToolThreads(0)
