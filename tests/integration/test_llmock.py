"""The runtime with OpenAIChatModel against a third-party OpenAI-compatible mock server,
LLMock (the ``llmock`` dev dependency, whose pytest plugin gives the ``llmock`` fixture: a
real server on 127.0.0.1 that answers with faults on demand). Every fault is
retried or waited out or surfaced, the thread state after it is the expected one, the
request bodies are the ones sent, and no input is lost or answered twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from llmock.pytest_plugin import LLMock
from llmock.scenarios import Reply

from dormant import Agent, Runtime
from dormant.models import breaker
from dormant.models.breaker import CircuitBreaker
from dormant.models.openai import OpenAIChatModel
from dormant.records import Usage
from dormant.slices.step import CONTINUE
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings


@pytest.fixture(autouse=True)
def fresh_breakers() -> Any:
    """Circuit breakers are per process: each test starts with closed ones."""
    breaker.reset()
    yield
    breaker.reset()


def make_model(llmock: LLMock, **options: Any) -> OpenAIChatModel:
    values: dict[str, Any] = {"model": "gpt-4o-mini", "base_url": llmock.base_url("openai"), "backoff": 0.01}
    values.update(options)
    return OpenAIChatModel(**values)


def agent(model: OpenAIChatModel, **options: Any) -> Agent:
    return Agent(name="a", model=model, system_prompt="", builtins=False, **options)


def bodies(llmock: LLMock) -> list[dict[str, Any]]:
    return [r.body for r in llmock.requests if r.path.endswith("/chat/completions")]


async def test_usage_and_a_continued_cut_reply(llmock: LLMock, tmp_path: Path) -> None:
    llmock.add(Reply(text="The answer", finish_reason="length"), Reply(text=" is 42."))
    model = make_model(llmock)
    try:
        async with Runtime(
            f"sqlite:///{tmp_path}/x.db", [agent(model, max_continuations=1)], settings=fast_settings()
        ) as rt:
            await rt.send("t", "what is the answer?", key="k1")
            await rt.run_until_idle(timeout=20)
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [(m.role, m.content) for m in history] == [
                ("user", "what is the answer?"),
                ("assistant", "The answer is 42."),
            ]
            answer = history[-1]
            assert answer.finish_reason == "stop" and not answer.cut
            assert answer.usage is not None and answer.usage.prompt > 0 and answer.usage.completion > 0
            assert (await rt.thread("t")).usage == answer.usage
    finally:
        await model.aclose()
    first, second = bodies(llmock)
    assert first["stream_options"] == {"include_usage": True}
    assert first["max_tokens"] == model.max_output_tokens
    assert first["messages"] == [{"role": "user", "content": "what is the answer?"}]
    assert second["messages"] == [
        {"role": "user", "content": "what is the answer?"},
        {"role": "assistant", "content": "The answer"},
        {"role": "user", "content": CONTINUE},
    ]


async def test_rate_limits_cut_and_malformed_streams_are_retried_and_nothing_is_doubled(
    llmock: LLMock, tmp_path: Path
) -> None:
    model = make_model(llmock, max_retries=3)
    settings = fast_settings(model_retries=4, retry_base_s=0.01, retry_max_s=0.05)
    try:
        async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent(model)], settings=settings) as rt:
            llmock.rate_limit(times=2, retry_after=0.01)
            llmock.reply("after 429s")
            await rt.send("t", "one", key="k1")
            await rt.run_until_idle(timeout=20)

            llmock.truncate(after_chunks=2)  # ends cleanly but early: never taken for a whole reply
            llmock.corrupt(after_chunks=2)
            llmock.reply("after broken streams", times=3)
            await rt.send("t", "two", key="k2")
            await rt.run_until_idle(timeout=20)

            thread = await rt.thread("t")
            assert (thread.status, thread.failures, thread.wait_reason) == ("active", 0, None)
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [(m.role, m.content) for m in history] == [
                ("user", "one"),
                ("assistant", "after 429s"),
                ("user", "two"),
                ("assistant", "after broken streams"),
            ]
    finally:
        await model.aclose()
    sent = bodies(llmock)
    assert [b["messages"][-1]["content"] for b in sent] == ["one"] * 3 + ["two"] * 3
    assert all(b["messages"][:-1] == sent[-1]["messages"][:-1] for b in sent[3:]), "the same request again"


async def test_an_outage_makes_the_thread_wait_visibly_then_it_is_answered(
    llmock: LLMock, tmp_path: Path
) -> None:
    endpoint = llmock.base_url("openai")
    quick = CircuitBreaker(endpoint, threshold=2, cooldown_s=0.2, max_cooldown_s=0.4)
    model = make_model(llmock, max_retries=0, breaker=quick)
    try:
        async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent(model)], settings=fast_settings()) as rt:
            llmock.outage(status=503)
            await rt.send("t", "hello", key="k1")
            with pytest.raises(TimeoutError):  # it waits; it does not fail
                await rt.run_until_idle(timeout=1.5)
            thread = await rt.thread("t")
            assert (thread.status, thread.failures) == ("active", 0)
            reason = thread.wait_reason or ""
            assert "503" in reason or "circuit open" in reason, reason
            status = await rt.status()
            assert status.threads_waiting == 1 and status.threads_by_status.get("failed", 0) == 0

            llmock.reset()  # the server is back
            llmock.reply("back")

            async def answered() -> bool:
                await rt.run_until_idle(timeout=20)
                return len(await all_messages(rt.store, "t")) == 2

            await eventually(answered, timeout=30)
            history = await all_messages(rt.store, "t")
            assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "back")]
            thread = await rt.thread("t")
            assert (thread.wait_reason, thread.failures) == (None, 0)
    finally:
        await model.aclose()


async def test_a_context_overflow_is_retried_once_with_a_smaller_view(llmock: LLMock, tmp_path: Path) -> None:
    model = make_model(llmock, max_retries=0)
    settings = fast_settings(view_messages=8)
    try:
        async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent(model)], settings=settings) as rt:
            for n in range(3):
                llmock.reply(f"answer {n}")
                await rt.send("t", f"question {n}", key=f"k{n}")
                await rt.run_until_idle(timeout=20)
            before = len(bodies(llmock))
            llmock.context_overflow()
            llmock.reply("after the overflow", times=3)
            await rt.send("t", "question 3", key="k3")
            await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert (thread.status, thread.failures) == ("active", 0)
            assert rt.stats.context_overflows == 1
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [m.content for m in history if m.role == "user"].count("question 3") == 1
            assert history[-1].content == "after the overflow"
            assert isinstance(thread.usage, Usage) and thread.usage.prompt > 0
    finally:
        await model.aclose()
    retried = bodies(llmock)[before:]
    assert len(retried[-1]["messages"]) < len(retried[0]["messages"]), "the retry sends a smaller view"
