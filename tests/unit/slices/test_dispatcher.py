"""The dispatcher's outcome rules, run against the in-memory store; backoff and truncate."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest

from dormant.agent import Agent
from dormant.errors import ToolError
from dormant.metrics import RuntimeStats
from dormant.models.scripted import echo_model
from dormant.records import Input, NewCall, OutboxEntry, OutboxOutcome, ViewLimits
from dormant.slices.dispatcher import Dispatcher
from dormant.slices.retry import backoff
from dormant.store.sqlite import SQLiteStore
from dormant.text import truncate
from dormant.tools.spec import ToolContext, ToolSpec, tool
from tests.helpers import FakeClock, eventually, open_calls

BASE = 0.5
CAP = 8.0
MAX_ATTEMPTS = 3

calls_seen: list[ToolContext] = []


@tool(mode="async")
async def ok(x: int, ctx: ToolContext) -> str:
    calls_seen.append(ctx)
    return f"ok {x}"


@tool(mode="async")
async def flaky() -> str:
    raise ToolError("try later", retryable=True)


@tool(mode="async")
async def refused() -> str:
    raise ToolError("no such account")


@tool(mode="async")
async def buggy() -> str:
    raise RuntimeError("boom")


@tool(mode="async", idempotent=True, timeout=0.05)
async def slow_idempotent() -> str:
    await asyncio.sleep(5)
    return "late"


@tool(mode="async", timeout=0.05)
async def slow_effect() -> str:
    await asyncio.sleep(5)
    return "late"


@tool(mode="async")
async def chatty() -> str:
    return "é" * 5000


TOOLS: list[ToolSpec] = [ok, flaky, refused, buggy, slow_idempotent, slow_effect, chatty]


@pytest.fixture
async def store(clock: FakeClock) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore("memory://", clock=clock)
    await s.open()
    yield s
    await s.close()


@pytest.fixture
def dispatcher(store: SQLiteStore, clock: FakeClock) -> Dispatcher:
    return Dispatcher(
        store,
        {"a": Agent(name="a", model=echo_model(), tools=TOOLS)},
        RuntimeStats(),
        worker="w1",
        concurrency=4,
        max_attempts=MAX_ATTEMPTS,
        retry_base_s=BASE,
        retry_max_s=CAP,
        poll_s=0.01,
        max_result_bytes=1024,
        clock=clock,
        on_result=lambda: None,
    )


def entry(
    tool_name: str, arguments: str = "{}", *, attempts: int = 1, idempotent: bool = False
) -> OutboxEntry:
    return OutboxEntry(
        id=1,
        thread_id="t1",
        agent="a",
        call_id="c1",
        tool=tool_name,
        arguments=arguments,
        status="running",
        attempts=attempts,
        idempotent=idempotent,
        token="tok",
    )


async def test_done_with_the_tools_text_and_the_call_context(
    dispatcher: Dispatcher, clock: FakeClock
) -> None:
    calls_seen.clear()
    outcome = await dispatcher.execute(entry("ok", '{"x": 3}', attempts=2))
    assert (outcome.kind, outcome.content, outcome.is_error) == ("done", "ok 3", False)
    assert (outcome.entry_id, outcome.token) == (1, "tok")
    (ctx,) = calls_seen
    assert (ctx.thread_id, ctx.call_id, ctx.agent, ctx.attempt, ctx.inline) == ("t1", "c1", "a", 2, False)
    assert ctx.now == clock.now
    assert dispatcher.stats.tool_calls == 1


async def test_retryable_tool_error_is_retried_with_backoff(dispatcher: Dispatcher, clock: FakeClock) -> None:
    outcome = await dispatcher.execute(entry("flaky", attempts=1))
    assert outcome.kind == "retry"
    assert clock.now + BASE * 0.8 <= outcome.retry_at <= clock.now + BASE * 1.2
    assert outcome.error == "try later"
    assert dispatcher.stats.tool_retries == 1


async def test_retryable_tool_error_at_the_last_attempt_is_dead(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("flaky", attempts=MAX_ATTEMPTS))
    assert outcome.kind == "dead"
    assert outcome.is_error
    assert outcome.content.startswith(f"error: gave up after {MAX_ATTEMPTS} attempts")
    assert dispatcher.stats.tool_failures == 1


async def test_non_retryable_tool_error_is_an_error_result(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("refused"))
    assert (outcome.kind, outcome.is_error, outcome.content) == ("done", True, "error: no such account")


async def test_any_other_exception_is_an_error_result(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("buggy"))
    assert (outcome.kind, outcome.is_error, outcome.content) == ("done", True, "error: RuntimeError: boom")


async def test_timeout_of_an_idempotent_tool_is_retried(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("slow_idempotent", idempotent=True))
    assert outcome.kind == "retry"
    assert outcome.error is not None and "timed out" in outcome.error


async def test_timeout_of_a_non_idempotent_tool_is_not_rerun(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("slow_effect"))
    assert outcome.kind == "done"
    assert outcome.is_error and "timed out after 0.05s" in outcome.content


async def test_unknown_tool_is_dead_lettered(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("vanished"))
    assert outcome.kind == "dead" and outcome.is_error
    assert "no tool 'vanished'" in outcome.content


async def test_bad_arguments_are_an_error_result(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("ok", '{"x": "three"}'))
    assert outcome.kind == "done" and outcome.is_error
    assert "invalid arguments" in outcome.content


async def test_large_results_are_truncated_to_the_input_limit(dispatcher: Dispatcher) -> None:
    outcome = await dispatcher.execute(entry("chatty"))
    assert len(outcome.content.encode()) <= 1024
    assert "output truncated" in outcome.content


async def _pending_results(store: SQLiteStore, thread_id: str) -> list[Input]:
    claims = await store.claim_threads("reader", 10, 30.0)
    assert [c.thread_id for c in claims] == [thread_id]
    load = await store.load_slice(claims[0], ViewLimits())
    await store.release(claims[0])
    return list(load.inputs)


async def test_retries_then_dead_letter_through_the_store(
    store: SQLiteStore, dispatcher: Dispatcher, clock: FakeClock
) -> None:
    await open_calls(store, "t1", [NewCall(call_id="c1", tool="flaky", arguments="{}")])
    attempts = 0
    while True:
        (claimed,) = await store.claim_outbox("w1", 10, 60.0)
        attempts += 1
        assert claimed.attempts == attempts
        outcome = await dispatcher.execute(claimed)
        assert await store.finish_outbox([outcome]) == [True]
        if outcome.kind != "retry":
            break
        assert await store.claim_outbox("w1", 10, 60.0) == [], "not due before its backoff"
        assert await store.has_work()
        clock.advance(CAP * 1.3)
    assert attempts == MAX_ATTEMPTS
    (dead,) = (await store.list_outbox()).items
    assert dead.status == "dead" and dead.attempts == MAX_ATTEMPTS
    (result,) = await _pending_results(store, "t1")
    assert (result.kind, result.call_id, result.dedup_key, result.is_error) == (
        "tool_result",
        "c1",
        "c1",
        True,
    )
    assert "gave up after 3 attempts" in result.content
    assert (await store.status()).dead_letters == 1


async def test_run_loop_executes_due_calls_and_admits_their_results(
    store: SQLiteStore, dispatcher: Dispatcher
) -> None:
    await open_calls(
        store, "t1", [NewCall(call_id=f"c{i}", tool="ok", arguments=f'{{"x": {i}}}') for i in range(6)]
    )
    woken: list[int] = []
    dispatcher.on_result = lambda: woken.append(1)
    stop = asyncio.Event()
    runner = asyncio.create_task(dispatcher.run(stop))

    async def all_answered() -> bool:
        return not [e for e in (await store.list_outbox()).items if e.status in ("pending", "running")]

    await eventually(all_answered, timeout=5)
    stop.set()
    await runner
    assert len(woken) == 6
    assert dispatcher.active == 0
    results = await _pending_results(store, "t1")
    assert sorted(r.content for r in results) == [f"ok {i}" for i in range(6)]


async def test_a_lost_lease_does_not_record_twice(store: SQLiteStore, dispatcher: Dispatcher) -> None:
    await open_calls(store, "t1", [NewCall(call_id="c1", tool="ok", arguments='{"x": 1}')])
    (claimed,) = await store.claim_outbox("w1", 10, 60.0)
    outcome = await dispatcher.execute(claimed)
    stale = OutboxOutcome(entry_id=outcome.entry_id, token="not-mine", kind="done", content="forged")
    assert await store.finish_outbox([stale]) == [False]
    assert await store.finish_outbox([outcome]) == [True]
    assert await store.finish_outbox([outcome]) == [False]
    (result,) = await _pending_results(store, "t1")
    assert result.content == "ok 1"


# -- backoff and truncate -------------------------------------------------------------------


def test_backoff_is_exponential_jittered_and_capped() -> None:
    rng = random.Random(7)
    for attempt in range(1, 12):
        raw = min(10.0, 0.5 * 2 ** (attempt - 1))
        for _ in range(20):
            delay = backoff(attempt, 0.5, 10.0, rng)
            assert raw * 0.8 <= delay <= min(10.0, raw * 1.2)
    assert backoff(0, 1.0, 10.0, rng) <= 1.2
    assert backoff(50, 1.0, 10.0, rng) <= 10.0


def test_backoff_without_rng_uses_the_module_random() -> None:
    assert 0.8 <= backoff(1, 1.0, 5.0) <= 1.2


def test_truncate_keeps_short_text_and_cuts_long_text_on_a_character_boundary() -> None:
    assert truncate("short", 1000) == "short"
    assert truncate("x" * 1000, 1000) == "x" * 1000
    text = "€" * 1000  # 3 bytes each
    cut = truncate(text, 500)
    assert len(cut.encode()) <= 500
    assert cut.startswith("€" * 100)
    assert "output truncated: 3000 bytes" in cut
