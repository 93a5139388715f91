"""Model failures through the runtime: OpenAIChatModel against a scripted HTTP server on
127.0.0.1. Timeouts, 5xx, 429 with Retry-After, malformed JSON and a stream cut mid-turn
are retried with backoff and leave nothing half-written; too many failures mark the
thread failed with the reason, and retry() resumes it."""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from dormant import Agent, Runtime, tool
from dormant.config import Settings
from dormant.models.breaker import CircuitBreaker
from dormant.models.openai import OpenAIChatModel
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings
from tests.openai_server import DONE, Reply, ScriptServer, delta, text_reply


@pytest.fixture
def server() -> Iterator[ScriptServer]:
    """A scripted OpenAI-compatible server on 127.0.0.1."""
    srv = ScriptServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


@pytest.fixture
async def model(server: ScriptServer) -> AsyncIterator[OpenAIChatModel]:
    """The model under test: no retries of its own, so every failure reaches the runtime."""
    m = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0, backoff=0.01, timeout=5.0)
    try:
        yield m
    finally:
        await m.aclose()


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"model_retries": 5, "retry_base_s": 0.01, "retry_max_s": 0.05}
    values.update(overrides)
    return fast_settings(**values)


def tool_call_reply(arguments: str) -> Reply:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": arguments},
    }
    return Reply(
        chunks=[delta({"role": "assistant", "tool_calls": [call]}), delta({}, finish="tool_calls"), DONE]
    )


async def test_5xx_and_429_with_retry_after_are_retried_with_backoff(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(status=503, chunks=[b'{"error": {"message": "overloaded"}}']),
        Reply(status=429, headers={"Retry-After": "0.4"}, chunks=[b'{"error": {"message": "slow down"}}']),
        text_reply("hello ", "back"),
    )
    async with Runtime(store_url, [Agent(name="a", model=model)], settings=settings()) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "hello back")]
        thread = await rt.thread("t1")
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None)
        assert rt.stats.slice_failures == 2 and rt.stats.slices == 1
    times = [r.at for r in server.received]
    assert len(times) == 3
    assert times[2] - times[1] >= 0.4, "the runtime waited as long as Retry-After asked"


async def test_timeouts_are_retried_then_fail_the_thread_with_the_reason(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    # the slice's own timeout (model_timeout_s) fires before the server answers, twice
    server.script(Reply(delay=0.5, chunks=[DONE]), Reply(delay=0.5, chunks=[DONE]), text_reply("at last"))
    async with Runtime(
        store_url, [Agent(name="a", model=model)], settings=settings(model_timeout_s=0.2, model_retries=1)
    ) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=20)
        thread = await rt.thread("t1")
        assert thread.status == "failed"
        assert thread.error is not None
        assert thread.error.startswith("ModelError: the model sent nothing within 0.2s (model_timeout_s")
        assert await all_messages(rt.store, "t1") == [], "nothing half-written"
        assert not await rt.store.has_work(), "a failed thread waits for retry"

        await rt.retry("t1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "at last")]
        assert (await rt.thread("t1")).status == "active"


async def test_malformed_json_in_the_stream_is_retried_and_nothing_half_written(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    server.script(
        Reply(chunks=[delta({"role": "assistant", "content": "a partial answer"}), b"data: {not json\n\n"]),
        text_reply("a whole answer"),
    )
    async with Runtime(store_url, [Agent(name="a", model=model)], settings=settings()) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "a whole answer")]
        assert rt.stats.slice_failures == 1


async def test_a_stream_cut_mid_turn_is_retried_and_nothing_half_written(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    half_call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "add", "arguments": '{"a":'},
    }
    server.script(
        # text, then half a tool call, then the connection drops: no [DONE], no finish_reason
        Reply(
            chunked=True,
            cut=True,
            chunks=[
                delta({"role": "assistant", "content": "let me add"}),
                delta({"tool_calls": [half_call]}),
            ],
        ),
        text_reply("4"),
    )
    agent = Agent(name="a", model=model, tools=[add])
    async with Runtime(store_url, [agent], settings=settings()) as rt:
        await rt.send("t1", "2+2?", key="k1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content, m.tool_calls) for m in history] == [
            ("user", "2+2?", ()),
            ("assistant", "4", ()),
        ]
        assert (await rt.store.list_outbox()).items == (), "no half tool call reached the outbox"
        assert rt.stats.slice_failures == 1


async def test_malformed_tool_call_arguments_reach_the_agent_as_an_error(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    server.script(tool_call_reply('{"a": 2, "b": '), text_reply("sorry, my arguments were broken"))
    agent = Agent(name="a", model=model, tools=[add])
    async with Runtime(store_url, [agent], settings=settings()) as rt:
        await rt.send("t1", "2+2?", key="k1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
        assert history[2].content.startswith("error: invalid arguments")
        assert rt.stats.slice_failures == 0, "a bad call is the agent's information, not a failure"
    sent = server.received[1].body["messages"]
    assert sent[-1]["role"] == "tool" and sent[-1]["content"].startswith("error: invalid arguments")
    assert json.loads(json.dumps(sent[-2]["tool_calls"]))[0]["function"]["arguments"] == '{"a": 2, "b": '


async def test_repeated_failures_fail_the_thread_visibly_and_retry_resumes_it(
    store_url: str, server: ScriptServer, model: OpenAIChatModel
) -> None:
    malformed = Reply(chunks=[delta({"content": "ok"}), b'data: {"choices": [\n\n', DONE])
    server.script(*[malformed] * 3)
    async with Runtime(store_url, [Agent(name="a", model=model)], settings=settings(model_retries=2)) as rt:
        await rt.send("t1", "hello", key="k1")
        await rt.run_until_idle(timeout=20)
        thread = await rt.thread("t1")
        assert (thread.status, thread.failures) == ("failed", 3), "the first attempt and 2 retries"
        assert thread.error is not None and "malformed JSON" in thread.error
        assert [t.id for t in (await rt.threads()).items if t.status == "failed"] == ["t1"]
        assert await all_messages(rt.store, "t1") == [], "nothing half-written"
        assert len(server.received) == 3

        server.script(text_reply("recovered"))
        await rt.retry("t1")
        await rt.run_until_idle(timeout=20)
        history = await all_messages(rt.store, "t1")
        assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "recovered")]
        thread = await rt.thread("t1")
        assert (thread.status, thread.failures, thread.error) == ("active", 0, None)


async def test_an_outage_makes_threads_wait_instead_of_failing(store_url: str, server: ScriptServer) -> None:
    """5xx past model_retries used to mark every thread failed; an outage is not
    the thread's fault, so it waits (the breaker opens) and resumes by itself."""
    breaker = CircuitBreaker(server.base_url, threshold=3, cooldown_s=0.05, max_cooldown_s=0.1)
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0, backoff=0.01, breaker=breaker)
    server.script(*[Reply(status=500, chunks=[b'{"error": {"message": "upstream exploded"}}'])] * 7)
    server.script(text_reply("recovered"))
    try:
        async with Runtime(
            store_url, [Agent(name="a", model=model)], settings=settings(model_retries=2)
        ) as rt:
            await rt.send("t1", "hello", key="k1")

            async def answered() -> bool:
                await rt.run_until_idle(timeout=20)
                return len(await all_messages(rt.store, "t1")) == 2

            await eventually(answered, timeout=20)
            history = await all_messages(rt.store, "t1")
            assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "recovered")]
            thread = await rt.thread("t1")
            assert (thread.status, thread.failures) == ("active", 0), (
                "7 failures > model_retries, none counted"
            )
            assert len(server.received) == 8, "each scripted reply once: open-breaker calls never reach it"
            assert breaker.closed
    finally:
        await model.aclose()
