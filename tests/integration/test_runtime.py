"""Runtime features end to end with scripted models: child threads, timers, failures,
inline tools, priorities, inputs arriving while calls are open."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator

import pytest

from dormant import (
    Agent,
    ModelError,
    ModelReply,
    ModelRequest,
    Priority,
    Runtime,
    ScriptedModel,
    ToolCall,
    UsageError,
    tool,
)
from dormant.models.base import ModelEvent, TextDelta
from dormant.models.scripted import echo_script
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings

_ids = itertools.count(1)


def call(name: str, arguments: str) -> ModelReply:
    return ModelReply(
        text="", tool_calls=(ToolCall(id=f"call_{next(_ids)}", name=name, arguments=arguments),)
    )


# -- child threads ------------------------------------------------------------------------


async def test_spawn_and_report_round_trip(store_url: str) -> None:
    child_views: dict[str, list[str]] = {}

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if "/" not in req.thread_id:  # the parent
            if last.role == "user" and last.content == "delegate":
                return call("spawn_thread", '{"task": "find the answer"}')
            if last.role == "tool":
                return ModelReply(text="waiting for my helper")
            assert last.content.startswith("[report from thread ")
            return ModelReply(text="boss got: " + last.content.split("] ", 1)[1])
        if last.role == "user":
            child_views[req.thread_id] = [m.content for m in req.messages]
            return call("report_to_parent", '{"report": "the answer is 42"}')
        return ModelReply(text="reported")

    agent = Agent(name="a", model=ScriptedModel(script))
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("boss", "delegate", key="k1")
        await rt.run_until_idle(timeout=20)

        boss = await all_messages(rt.store, "boss")
        check_history(boss)
        assert [m.role for m in boss] == ["user", "assistant", "tool", "assistant", "user", "assistant"]
        spawn_call = boss[1].tool_calls[0]
        child_id = f"boss/{spawn_call.id}"
        assert boss[2].content.startswith(f"spawned thread {child_id}")
        assert (
            boss[4].source == "report"
            and boss[4].content == f"[report from thread {child_id}] the answer is 42"
        )
        assert boss[5].content == "boss got: the answer is 42"

        child = await rt.thread(child_id)
        assert (child.parent_id, child.parent_seq, child.agent, child.status) == ("boss", 1, "a", "active")
        # the child sees the parent's history up to the spawn point (not the spawning call) and its task
        assert child_views == {child_id: ["delegate", "find the answer"]}
        kid = await all_messages(rt.store, child_id)
        check_history(kid)
        assert [m.content for m in kid if m.role != "assistant"] == ["find the answer", "report sent to boss"]
        assert [t.id for t in (await rt.threads()).items] == ["boss", child_id]


# -- timers -----------------------------------------------------------------------------


async def test_sleep_until_wakes_only_after_not_before(store_url: str) -> None:
    woke_at: list[float] = []
    set_at: list[float] = []
    # long enough that the first run_until_idle (a slice and its commit, slow on a loaded
    # machine) ends before the timer is due, as it must not wait for it
    nap = 1.0

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user" and last.source == "user":
            set_at.append(time.time())
            return call("sleep_until", f'{{"seconds": {nap}, "note": "alarm"}}')
        if last.role == "tool":
            return ModelReply(text="sleeping")
        woke_at.append(time.time())
        assert last.content == "[timer] alarm"
        return ModelReply(text="awake")

    async with Runtime(
        store_url, [Agent(name="a", model=ScriptedModel(script))], settings=fast_settings()
    ) as rt:
        started = time.time()
        await rt.send("t1", "nap please", key="k1")
        await rt.run_until_idle(timeout=10)  # the due-later timer does not keep it running
        assert woke_at == []
        history = await all_messages(rt.store, "t1")
        assert history[-1].content == "sleeping"
        assert history[2].content.startswith("will wake at")
        assert not await rt.store.has_work()
        assert (await rt.status()).backlog_by_priority == {"P1": 1}

        # the timer is due ``nap`` after the call ran (not ``started``: the slice may have
        # come late); the store's clock (PostgreSQL: the server's, as this process estimates
        # it) may lag ours by a few ms, so look again until it is due there too
        await asyncio.sleep(max(0.0, set_at[0] + nap - time.time()) + 0.05)
        await rt.run_until_idle(timeout=10)
        deadline = time.time() + 5
        while not woke_at and time.time() < deadline:
            await asyncio.sleep(0.05)
            await rt.run_until_idle(timeout=10)
        assert len(woke_at) == 1 and woke_at[0] >= started + nap
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.content for m in history[-2:]] == ["[timer] alarm", "awake"]
        assert history[-2].source == "timer"


# -- failures ---------------------------------------------------------------------------


class FlakyModel:
    """Streams part of a reply, then breaks, ``fail`` times; then answers."""

    name = "flaky"
    context_window = 10_000
    max_output_tokens = 1_000
    encoding = "o200k_base"

    def __init__(self, fail: int, *, retryable: bool = True) -> None:
        self.fail = fail
        self.retryable = retryable
        self.calls = 0

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        self.calls += 1
        if self.calls <= self.fail:
            yield TextDelta(text="half a rep")
            raise ModelError("stream broke", retryable=self.retryable)
        yield TextDelta(text=f"answer {self.calls}")


async def test_a_retryable_model_error_retries_the_slice_and_writes_nothing_half(store_url: str) -> None:
    model = FlakyModel(fail=2)
    async with Runtime(
        store_url, [Agent(name="a", model=model)], settings=fast_settings(model_retries=5)
    ) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "answer 3")]
        thread = await rt.thread("t1")
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None)
        assert rt.stats.slice_failures == 2 and rt.stats.slices == 1
        assert model.calls == 3


async def test_a_failure_after_an_inline_round_commits_nothing_of_it(store_url: str) -> None:
    effects: list[int] = []

    @tool
    def note(n: int) -> str:
        """Record n."""
        effects.append(n)
        return f"noted {n}"

    rounds = itertools.count()

    def script(req: ModelRequest) -> ModelReply:
        n = next(rounds)
        if req.messages[-1].role == "user":
            return call("note", f'{{"n": {n}}}')
        if n == 1:
            raise ModelError("second round failed")
        return ModelReply(text="done")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[note])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "go", key="k1")
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        assert history[2].content == "noted 2", "only the successful attempt's round is in the history"
        assert effects == [0, 2], "inline tools ran in both attempts; only one committed"


async def test_a_non_retryable_error_fails_the_thread_until_retried(store_url: str) -> None:
    model = FlakyModel(fail=1, retryable=False)
    async with Runtime(store_url, [Agent(name="a", model=model)], settings=fast_settings()) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.send("t2", "other thread", key="k1")
        await rt.run_until_idle(timeout=10)
        failed = [t for t in (await rt.threads()).items if t.status == "failed"]
        assert len(failed) == 1, "exactly the thread whose slice hit the error"
        bad = failed[0]
        assert bad.error is not None and "stream broke" in bad.error
        assert await all_messages(rt.store, bad.id) == [], "nothing half-written"
        assert not await rt.store.has_work()
        assert (await rt.status()).backlog_by_priority == {"P1": 1}

        again = await rt.retry(bad.id)
        assert again.status == "active"
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, bad.id)
        assert [m.role for m in history] == ["user", "assistant"]
        assert (await rt.thread(bad.id)).status == "active"


async def test_too_many_retryable_failures_fail_the_thread(store_url: str) -> None:
    model = FlakyModel(fail=100)
    async with Runtime(
        store_url, [Agent(name="a", model=model)], settings=fast_settings(model_retries=2)
    ) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=10)
        thread = await rt.thread("t1")
        assert thread.status == "failed"
        assert model.calls == 3, "the first attempt and model_retries retries"
        assert await all_messages(rt.store, "t1") == []


async def test_a_thread_of_an_unknown_agent_waits_without_a_model_call(store_url: str) -> None:
    # a runtime claims only its own agents' threads; one it cannot serve waits
    # for a worker that can (it is not failed), and run_until_idle does not wait for it
    model = FlakyModel(fail=0)
    async with Runtime(store_url, [Agent(name="a", model=model)], settings=fast_settings()) as rt:
        await rt.store.create_thread("orphan", "nobody")
        from dormant import NewInput

        await rt.admit([NewInput(thread_id="orphan", kind="user", dedup_key="k", content="hi")])
        await rt.run_until_idle(timeout=10)
        thread = await rt.thread("orphan")
        assert thread.status == "active" and thread.failures == 0
        assert (await rt.status()).ready_by_agent == {"nobody": 1}
        assert model.calls == 0


# -- inline tools ---------------------------------------------------------------------


async def test_inline_tools_answer_within_the_slice(store_url: str) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user":
            return ModelReply(
                text="adding",
                tool_calls=(
                    ToolCall(id="c1", name="add", arguments='{"a": 2, "b": 3}'),
                    ToolCall(id="c2", name="add", arguments='{"a": "x"}'),
                ),
            )
        return ModelReply(text="results: " + ",".join(m.content for m in req.messages if m.role == "tool"))

    agent = Agent(name="a", model=ScriptedModel(script), tools=[add])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "add please", key="k1")
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "tool", "assistant"]
        assert history[2].content == "5"
        assert history[3].content.startswith("error: invalid arguments")
        assert history[4].content.startswith("results: 5,error:")
        assert (rt.stats.slices, rt.stats.completions, rt.stats.inline_calls, rt.stats.tool_calls) == (
            1,
            2,
            1,
            0,
        )
        assert (await rt.store.list_outbox()).items == ()


async def test_an_inline_tool_that_raises_or_hangs_is_answered_with_an_error(store_url: str) -> None:
    @tool
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("kaput")

    @tool(timeout=0.05)
    async def stuck() -> str:
        """Never answers in time."""
        await asyncio.sleep(5)
        return "late"

    def script(req: ModelRequest) -> ModelReply:
        if req.messages[-1].role == "user":
            return ModelReply(
                text="",
                tool_calls=(
                    ToolCall(id="c1", name="broken", arguments="{}"),
                    ToolCall(id="c2", name="stuck", arguments="{}"),
                ),
            )
        return ModelReply(text="ok")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[broken, stuck])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "go", key="k1")
        await rt.run_until_idle(timeout=10)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert history[2].content == "error: RuntimeError: kaput"
        assert history[3].content == "error: timed out after 0.05s"


# -- scheduling -------------------------------------------------------------------------


async def test_priorities_are_visible_with_one_slot(store_url: str) -> None:
    order: list[str] = []

    def script(req: ModelRequest) -> ModelReply:
        order.append(req.thread_id)
        return echo_script(req)

    agent = Agent(name="a", model=ScriptedModel(script))
    async with Runtime(store_url, [agent], settings=fast_settings(concurrency=1)) as rt:
        await rt.send("bulk-1", "x", key="k", priority=Priority.P2)
        await rt.send("bulk-2", "x", key="k", priority=Priority.P2)
        await rt.send("normal-1", "x", key="k", priority=Priority.P1)
        await rt.send("urgent-1", "x", key="k", priority=Priority.P0)
        await rt.send("normal-2", "x", key="k", priority=Priority.P1)
        await rt.send("urgent-2", "x", key="k", priority=Priority.P0)
        await rt.run_until_idle(timeout=10)
    assert order == ["urgent-1", "urgent-2", "normal-1", "normal-2", "bulk-1", "bulk-2"]


async def test_inputs_arriving_while_a_call_is_open_wait_for_its_result(store_url: str) -> None:
    gate = asyncio.Event()

    @tool(mode="async")
    async def slow(q: str) -> str:
        """Waits for the test to open the gate."""
        await gate.wait()
        return f"slow {q}"

    def script(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if last.role == "user":
            return call("slow", '{"q": "' + last.content + '"}')
        return ModelReply(text="after " + last.content)

    agent = Agent(name="a", model=ScriptedModel(script), tools=[slow])
    threads = [f"t{i}" for i in range(20)]
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        runner = asyncio.create_task(rt.run())
        try:
            for t in threads:
                await rt.send(t, "first", key="k1")

            async def all_waiting() -> bool:
                running = (await rt.store.list_outbox(status="running", limit=1000)).items
                return len(running) == len(threads)

            await eventually(all_waiting)
            for t in threads:
                await rt.send(t, "second", key="k2")
                await rt.send(t, "third", key="k3")
            await asyncio.sleep(0.1)  # give the scheduler a chance to (wrongly) run them
            for t in threads:
                assert (await rt.thread(t)).last_seq == 2
            gate.set()

            async def all_done() -> bool:
                return not await rt.store.has_work()

            await eventually(all_done)
        finally:
            rt.stop()
            await runner
        for t in threads:
            history = await all_messages(rt.store, t)
            report = check_history(history)
            assert report.user_contents == ["first", "second", "third"]
            assert [m.role for m in history[:4]] == ["user", "assistant", "tool", "assistant"]


async def test_sends_are_idempotent_by_key(store_url: str) -> None:
    async with Runtime(
        store_url, [Agent(name="a", model=ScriptedModel(echo_script))], settings=fast_settings()
    ) as rt:
        first = await rt.send("t1", "hello", dedup_key="same")
        again = await rt.send("t1", "hello (retried)", key="same")  # the earlier name
        assert again.duplicate and again.input_id == first.input_id
        with pytest.raises(UsageError):
            await rt.send("t1", "hello", dedup_key="same", key="other")
        await rt.run_until_idle(timeout=10)
        await rt.send("t1", "hello (late retry)", key="same")
        await rt.run_until_idle(timeout=10)
        assert [m.content for m in await all_messages(rt.store, "t1")] == ["hello", "echo: hello"]


async def test_runtime_refuses_bad_configuration() -> None:
    from dormant import UsageError

    with pytest.raises(UsageError):
        Runtime("memory://", [], settings=fast_settings())
    a = Agent(name="a", model=ScriptedModel(echo_script))
    with pytest.raises(UsageError):
        Runtime("memory://", [a, a], settings=fast_settings())
    with pytest.raises(UsageError):
        Runtime("memory://", [a], settings=fast_settings(), default_agent="b")
    async with Runtime("memory://", [a], settings=fast_settings()) as rt:
        with pytest.raises(UsageError):
            await rt.send("t1", "x", agent="nobody")


async def test_a_call_id_reused_in_a_later_turn_is_still_answered(store_url: str) -> None:
    @tool(mode="async")
    async def ping() -> str:
        """Answer pong."""
        return "pong"

    def script(req: ModelRequest) -> ModelReply:
        if req.messages[-1].role == "user":
            return ModelReply(text="", tool_calls=(ToolCall(id="call_0", name="ping", arguments="{}"),))
        return ModelReply(text="got " + req.messages[-1].content)

    agent = Agent(name="a", model=ScriptedModel(script), tools=[ping])
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await rt.send("t1", "first", key="k1")
        await rt.run_until_idle(timeout=5)
        await rt.send("t1", "second", key="k2")
        await rt.run_until_idle(timeout=5)
        assert (await rt.thread("t1")).awaiting == 0, "the second call was never answered"
        history = await all_messages(rt.store, "t1")
        assert [m.content for m in history if m.role == "assistant" and not m.tool_calls] == ["got pong"] * 2
