"""Tool failures: exceptions and timeouts become error results the agent sees; retryable
failures are retried, then dead-lettered with an answer; a call whose side effect
happened but whose completion died with its worker follows the idempotent / unknown
rule (never silently re-run, never lost)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections import Counter
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, ToolError, tool
from dormant.inbox import UNKNOWN_OUTCOME
from dormant.tools.spec import ToolContext, ToolSpec
from tests.faults.conftest import Workers
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings


def agent_calling(spec: ToolSpec, seen: dict[str, str]) -> Agent:
    """An agent that calls ``spec`` once per user text and records the result it is shown."""

    def script(request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="c", name=spec.name, arguments="{}"),))
        seen[request.thread_id] = last.content
        return ModelReply(text="noted")

    return Agent(name="a", model=ScriptedModel(script), tools=[spec])


async def run_one(store_url: str, spec: ToolSpec, **overrides: object) -> tuple[str, list[tuple[str, int]]]:
    """Run one call of ``spec`` to the end: the result the agent saw, and (status, attempts)
    of what the outbox keeps (only dead-lettered and unknown calls stay)."""
    seen: dict[str, str] = {}
    async with Runtime(store_url, [agent_calling(spec, seen)], settings=fast_settings(**overrides)) as rt:
        await rt.send("t1", "go", key="k1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        assert (await rt.thread("t1")).status == "active", "a tool failure never fails the thread"
        outbox: list[tuple[str, int]] = [(e.status, e.attempts) for e in (await rt.store.list_outbox()).items]
    return seen["t1"], outbox


async def test_an_async_tool_that_raises_answers_with_the_error(store_url: str) -> None:
    @tool(mode="async")
    async def explode() -> str:
        """Always fails."""
        raise RuntimeError("the disk is on fire")

    result, outbox = await run_one(store_url, explode)
    assert result == "error: RuntimeError: the disk is on fire"
    assert outbox == [], "answered: the call left the outbox"


async def test_a_non_idempotent_tool_that_times_out_is_answered_not_retried(store_url: str) -> None:
    runs = 0

    @tool(mode="async", timeout=0.05)
    async def pay() -> str:
        """Hangs (not idempotent: it may have paid, so it must not run again)."""
        nonlocal runs
        runs += 1
        await asyncio.sleep(5)
        return "paid"

    result, _ = await run_one(store_url, pay)
    assert result == "error: timed out after 0.05s"
    assert runs == 1


async def test_an_idempotent_tool_that_keeps_timing_out_is_retried_then_dead_lettered(store_url: str) -> None:
    runs = 0

    @tool(mode="async", idempotent=True, timeout=0.05)
    async def fetch() -> str:
        """Hangs every time (idempotent: safe to retry)."""
        nonlocal runs
        runs += 1
        await asyncio.sleep(5)
        return "fetched"

    result, outbox = await run_one(store_url, fetch, tool_attempts=3)
    assert result == "error: gave up after 3 attempts: timed out after 0.05s"
    assert runs == 3
    assert outbox == [("dead", 3)], "the dead letter stays for inspection"


async def test_a_retryable_tool_error_is_retried_until_it_works(store_url: str) -> None:
    attempts: list[int] = []

    @tool(mode="async")
    async def flaky(ctx: ToolContext) -> str:
        """Fails twice, then works."""
        attempts.append(ctx.attempt)
        if len(attempts) < 3:
            raise ToolError("try again", retryable=True)
        return "worked"

    result, _ = await run_one(store_url, flaky, tool_attempts=5)
    assert result == "worked"
    assert attempts == [1, 2, 3]


@pytest.mark.timeout(60)
async def test_a_call_whose_worker_died_after_its_side_effect_follows_the_unknown_rule(
    tmp_path: Path, workers: Workers
) -> None:
    db = tmp_path / "crash.db"
    effects = tmp_path / "effects.log"
    proc = workers.start("hang", str(db), str(tmp_path))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if effects.exists() and len(effects.read_text().split("\n")) > 2:  # both effects happened
            break
        await asyncio.sleep(0.01)
    assert proc.poll() is None, proc.communicate()
    os.kill(proc.pid, signal.SIGKILL)  # both calls are running; their completion is lost
    proc.wait(timeout=10)

    transfers = 0

    @tool(mode="async")
    async def transfer(amount: int, ctx: ToolContext) -> str:
        """Move money (not idempotent): must never run again for the same call."""
        nonlocal transfers
        transfers += 1
        return "moved"

    @tool(mode="async", idempotent=True)
    async def sync(ctx: ToolContext) -> str:
        """Idempotent by its key: a re-run with a key already done does nothing again."""
        done = {line.split()[1] for line in effects.read_text().splitlines() if line.startswith("sync ")}
        if ctx.call_id in done:
            return f"synced (already done for {ctx.call_id})"
        effects.open("a").write(f"sync {ctx.call_id}\n")
        return "synced"

    def script(request: ModelRequest) -> ModelReply:
        return ModelReply(text=f"after: {request.messages[-1].content}")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[transfer, sync])
    async with Runtime(f"sqlite:///{db}", [agent], settings=fast_settings()) as rt:
        await rt.run_until_idle(timeout=20)  # the dead worker's call leases (0.5 s) expire meanwhile
        money = await all_messages(rt.store, "money")
        mirror = await all_messages(rt.store, "mirror")
        entries = {e.thread_id: e for e in (await rt.store.list_outbox()).items}
    check_history(money)
    check_history(mirror)
    # not idempotent: not re-run; the agent is told the outcome is unknown
    assert transfers == 0
    assert money[2].role == "tool" and money[2].content == UNKNOWN_OUTCOME
    assert money[3].content.startswith("after: outcome unknown")
    assert entries["money"].status == "unknown"
    # idempotent: re-run under the same idempotency key, which did the effect once
    assert mirror[2].content.startswith("synced (already done for")
    assert "mirror" not in entries
    ran = Counter(line for line in effects.read_text().splitlines())
    assert all(n == 1 for n in ran.values()) and len(ran) == 2, ran
