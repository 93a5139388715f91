"""Redelivery: the same input admitted again and again, concurrently, has one effect."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, NewInput, Runtime, ScriptedModel, Settings, ToolCall
from dormant.tools.spec import ToolContext, tool
from tests.helpers import all_messages, check_history, eventually

THREADS = 30
INPUTS = 4
COPIES = 3


def settings() -> Settings:
    return Settings.build(concurrency=16, poll_s=0.01, retry_base_s=0.01, retry_max_s=0.05)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "postgres":
        pg_url: str = request.getfixturevalue("pg_url")
        return pg_url
    return "memory://" if request.param == "memory" else f"sqlite:///{tmp_path}/redelivery.db"


async def test_inputs_admitted_three_times_concurrently_have_one_effect_each(url: str) -> None:
    model_calls = 0

    def script(request: ModelRequest) -> ModelReply:
        nonlocal model_calls
        model_calls += 1
        return ModelReply(text="ack")

    items = [
        NewInput(thread_id=f"t{t}", kind="user", dedup_key=f"msg-{i}", content=f"message {i}", agent="a")
        for t in range(THREADS)
        for i in range(INPUTS)
    ]
    async with Runtime(url, [Agent(name="a", model=ScriptedModel(script))], settings=settings()) as rt:
        runner = asyncio.create_task(rt.run())
        try:
            # several senders deliver every input COPIES times: whole batches, single items,
            # in different orders, all at once, while slices already run
            senders = []
            for copy in range(COPIES):
                order = items if copy % 2 == 0 else list(reversed(items))
                senders.append(rt.admit(order))
                senders.extend(rt.admit([item]) for item in order[copy::COPIES])
            results = await asyncio.gather(*senders)
            await asyncio.gather(*(rt.admit([item]) for item in items))  # and once more, late
        finally:
            rt.stop()
            await runner
        await rt.run_until_idle(timeout=30)

        admissions = [a for batch in results for a in batch]
        by_key: dict[tuple[str, str], set[int]] = {}
        fresh: Counter[tuple[str, str]] = Counter()
        for a in admissions:
            by_key.setdefault((a.thread_id, a.dedup_key), set()).add(a.input_id)
            fresh[(a.thread_id, a.dedup_key)] += not a.duplicate
        assert len(by_key) == THREADS * INPUTS
        assert all(len(ids) == 1 for ids in by_key.values()), "every copy names the same input"
        assert all(n == 1 for n in fresh.values()), "exactly one copy is new"

        for t in range(THREADS):
            messages = await all_messages(rt.store, f"t{t}")
            report = check_history(messages)
            assert sorted(report.user_contents) == sorted(f"message {i}" for i in range(INPUTS))
            assert {m.input_id for m in messages if m.role == "user"} == {
                next(iter(by_key[(f"t{t}", f"msg-{i}")])) for i in range(INPUTS)
            }
        assert sum((await rt.status()).backlog_by_priority.values()) == 0
        assert model_calls <= THREADS * INPUTS, "a slice per new input at most, never per copy"


async def test_tool_results_delivered_many_times_answer_the_call_once(url: str) -> None:
    gate = asyncio.Event()
    runs: Counter[str] = Counter()

    @tool(mode="async")
    async def transfer(amount: int, ctx: ToolContext) -> str:
        """Move money (async, not idempotent)."""
        runs[ctx.call_id] += 1
        await gate.wait()
        return "from the dispatcher"

    def script(request: ModelRequest) -> ModelReply:
        last = request.messages[-1]
        if last.role == "user":
            call_id = f"call-{request.thread_id}"
            return ModelReply(
                text="", tool_calls=(ToolCall(id=call_id, name="transfer", arguments='{"amount": 5}'),)
            )
        return ModelReply(text=f"result was: {last.content}")

    threads = [f"t{i}" for i in range(10)]
    agent = Agent(name="a", model=ScriptedModel(script), tools=[transfer])
    async with Runtime(url, [agent], settings=settings()) as rt:
        runner = asyncio.create_task(rt.run())
        try:
            for t in threads:
                await rt.send(t, "pay", key="k1")

            async def all_running() -> bool:
                return len(runs) == len(threads)

            await eventually(all_running)
            # a webhook posts each result three times, concurrently, before the dispatcher answers
            open_calls = (await rt.store.list_outbox(status="running", limit=100)).items
            call_of = {e.thread_id: e.call_id for e in open_calls}
            assert set(call_of) == set(threads)
            posts = [
                rt.post_tool_result(t, call_of[t], "from the webhook") for t in threads for _ in range(COPIES)
            ]
            admissions = await asyncio.gather(*posts)
            assert sum(not a.duplicate for a in admissions) == len(threads), "one answer per call"
            gate.set()

            async def idle() -> bool:
                return not await rt.store.has_work()

            await eventually(idle)
        finally:
            rt.stop()
            await runner

        assert all(n == 1 for n in runs.values())
        for t in threads:
            messages = await all_messages(rt.store, t)
            check_history(messages)
            tool_messages = [m for m in messages if m.role == "tool"]
            assert [m.content for m in tool_messages] == ["from the webhook"]
            assert messages[-1].content == "result was: from the webhook"
            assert (await rt.thread(t)).awaiting == 0
