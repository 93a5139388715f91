"""What a model server says about each reply, end to end, against the loopback
OpenAI-compatible server: usage per message and per thread, a reply cut by the output cap
(marked, and continued when the agent asks), reasoning kept apart and never sent back, a
refusal surfaced instead of stored, and a thread waiting on an outage shown as waiting.
Each test asserts the exact request bodies and the thread state after the fault."""

from __future__ import annotations

import asyncio
import json

from dormant import Agent, Runtime
from dormant.models.breaker import CircuitBreaker
from dormant.models.openai import OpenAIChatModel
from dormant.records import Usage
from dormant.slices.step import CONTINUE
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings
from tests.openai_server import DONE, Reply, ScriptServer, delta, fresh_breakers, server, sse, text_reply

__all__ = ["fresh_breakers", "server"]  # fixtures, used by name


def usage_chunk(prompt: int, completion: int, cached: int = 0) -> bytes:
    """The usage-only chunk a server sends last when asked (``include_usage``)."""
    return sse(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached},
            },
        }
    )


def reply(
    text: str, *, finish: str = "stop", reasoning: str = "", usage: tuple[int, ...] | None = None
) -> Reply:
    chunks = [delta({"role": "assistant", "content": ""})]
    if reasoning:
        chunks.append(delta({"reasoning_content": reasoning}))
    chunks += [delta({"content": text}), delta({}, finish=finish)]
    if usage is not None:
        chunks.append(usage_chunk(*usage))
    return Reply(chunks=[*chunks, DONE])


def agent(model: OpenAIChatModel) -> Agent:
    """An agent with no system prompt and no tools: request bodies hold the history alone."""
    return Agent(name="a", model=model, system_prompt="", builtins=False)


async def test_usage_reasoning_and_finish_reason_are_stored_and_reasoning_is_never_sent_back(
    store_url: str, server: ScriptServer
) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    server.script(
        reply("four", reasoning="2 + 2 is 4", usage=(100, 20, 64)),
        reply("eight", reasoning="4 + 4 is 8", usage=(130, 25, 96)),
    )
    try:
        async with Runtime(store_url, [agent(model)], settings=fast_settings()) as rt:
            await rt.send("t", "2 + 2?", key="k1")
            await rt.run_until_idle(timeout=20)
            await rt.send("t", "4 + 4?", key="k2")
            await rt.run_until_idle(timeout=20)
            history = await all_messages(rt.store, "t")
            check_history(history)
            answers = [m for m in history if m.role == "assistant"]
            assert [(m.content, m.reasoning, m.finish_reason, m.cut) for m in answers] == [
                ("four", "2 + 2 is 4", "stop", False),
                ("eight", "4 + 4 is 8", "stop", False),
            ]
            assert [m.usage for m in answers] == [
                Usage(prompt=100, completion=20, cached=64),
                Usage(prompt=130, completion=25, cached=96),
            ]
            assert all(m.usage is None and m.finish_reason is None for m in history if m.role == "user")
            thread = await rt.thread("t")
            assert thread.usage == Usage(prompt=230, completion=45, cached=160)
            status = await rt.status()
            assert status.usage == {"prompt": 230, "completion": 45, "cached": 160}
            assert rt.stats.prompt_tokens == 230 and rt.stats.completion_tokens == 45
    finally:
        await model.aclose()

    first, second = (r.body for r in server.received)
    assert first["stream_options"] == {"include_usage": True}
    assert second["messages"] == [
        {"role": "user", "content": "2 + 2?"},
        {"role": "assistant", "content": "four"},  # the answer alone: no reasoning
        {"role": "user", "content": "4 + 4?"},
    ]


async def test_a_cut_reply_is_marked_cut_and_not_continued_by_default(
    store_url: str, server: ScriptServer
) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    server.script(reply("The answer is", finish="length", usage=(50, 4096)))
    try:
        async with Runtime(store_url, [agent(model)], settings=fast_settings()) as rt:
            await rt.send("t", "long question", key="k1")
            await rt.run_until_idle(timeout=20)
            page = await rt.history("t")
            assert [(m.role, m.content, m.cut) for m in page.items] == [
                ("user", "long question", False),
                ("assistant", "The answer is", True),
            ]
            assert page.items[-1].finish_reason == "length"
            assert (await rt.thread("t")).status == "active"
            assert rt.stats.replies_cut == 1 and rt.stats.continuations == 0
    finally:
        await model.aclose()
    assert len(server.received) == 1, "max_continuations is 0 by default"


async def test_a_cut_reply_is_continued_within_the_agents_bound(store_url: str, server: ScriptServer) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    agent = Agent(name="a", model=model, system_prompt="", builtins=False, max_continuations=2)
    server.script(
        reply("one, ", finish="length", reasoning="count", usage=(10, 5)),
        reply("two, ", finish="length", usage=(20, 5, 8)),
        reply("three", finish="length", usage=(30, 5, 16)),  # still cut: the bound is reached
        reply("next answer", usage=(40, 2)),
    )
    try:
        async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
            await rt.send("t", "count to three", key="k1")
            await rt.run_until_idle(timeout=20)
            history = await all_messages(rt.store, "t")
            check_history(history)
            assert [(m.role, m.content) for m in history] == [
                ("user", "count to three"),
                ("assistant", "one, two, three"),
            ], "one message: nothing duplicated, the continuation prompt not stored"
            answer = history[-1]
            assert answer.cut, "the last piece was cut too"
            assert answer.usage == Usage(prompt=60, completion=15, cached=24)
            assert answer.reasoning == "count"
            assert (await rt.thread("t")).usage == Usage(prompt=60, completion=15, cached=24)
            assert rt.stats.continuations == 2

            await rt.send("t", "again", key="k2")
            await rt.run_until_idle(timeout=20)
    finally:
        await model.aclose()

    bodies = [r.body for r in server.received]
    assert len(bodies) == 4
    assert bodies[1]["messages"] == [
        {"role": "user", "content": "count to three"},
        {"role": "assistant", "content": "one, "},
        {"role": "user", "content": CONTINUE},
    ]
    assert bodies[2]["messages"][-2:] == [
        {"role": "assistant", "content": "one, two, "},
        {"role": "user", "content": CONTINUE},
    ]
    assert bodies[3]["messages"] == [
        {"role": "user", "content": "count to three"},
        {"role": "assistant", "content": "one, two, three"},
        {"role": "user", "content": "again"},
    ]


async def test_a_refusal_is_surfaced_not_stored_and_the_input_survives(
    store_url: str, server: ScriptServer
) -> None:
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0)
    server.script(
        Reply(
            chunks=[
                delta({"role": "assistant", "content": "I will"}),
                delta({}, finish="content_filter"),
                DONE,
            ]
        ),
        Reply(
            chunks=[
                delta({"role": "assistant", "refusal": "I can't help with that."}),
                delta({}, finish="stop"),
                DONE,
            ]
        ),
    )
    try:
        async with Runtime(store_url, [agent(model)], settings=fast_settings()) as rt:
            await rt.send("t", "something", key="k1")
            await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert thread.status == "failed" and "content filter" in (thread.error or "")
            assert await all_messages(rt.store, "t") == [], "no answer stored, the input not consumed"
            assert rt.stats.refusals == 1

            await rt.retry("t")
            await rt.run_until_idle(timeout=20)
            thread = await rt.thread("t")
            assert thread.status == "failed" and "I can't help with that." in (thread.error or "")
            assert await all_messages(rt.store, "t") == []

            server.script(text_reply("fine"))
            await rt.retry("t")
            await rt.run_until_idle(timeout=20)
            history = await all_messages(rt.store, "t")
            assert [(m.role, m.content) for m in history] == [("user", "something"), ("assistant", "fine")]
    finally:
        await model.aclose()
    assert len(server.received) == 3
    assert all(r.body["messages"] == [{"role": "user", "content": "something"}] for r in server.received)


async def test_a_thread_waiting_on_an_outage_shows_the_wait_until_it_is_answered(
    store_url: str, server: ScriptServer
) -> None:
    # the first 503 opens the breaker; the thread then waits out its 2 s cool-down
    breaker = CircuitBreaker(server.base_url, threshold=1, cooldown_s=2.0, max_cooldown_s=2.0)
    model = OpenAIChatModel(model="m", base_url=server.base_url, max_retries=0, backoff=0.01, breaker=breaker)
    down = Reply(status=503, chunks=[b'{"error": {"message": "upstream down"}}'])
    server.script(down)
    try:
        async with Runtime(store_url, [agent(model)], settings=fast_settings()) as rt:
            await rt.send("t", "hello", key="k1")
            running = asyncio.create_task(rt.run())
            try:

                async def waiting() -> bool:
                    return "circuit open" in ((await rt.thread("t")).wait_reason or "")

                await eventually(waiting, timeout=10)
                thread = await rt.thread("t")
                assert (thread.status, thread.failures) == ("active", 0)
                assert "127.0.0.1" in (thread.wait_reason or "")
                assert thread.wait_until >= thread.updated_at + 1, "the breaker's cool-down"
                status = await rt.status()
                assert status.threads_waiting == 1 and status.waiting_until == thread.wait_until
                assert sum(status.waiting_by_reason.values()) == 1
                assert status.threads_by_status.get("failed", 0) == 0
                server.script(text_reply("back"))

                async def answered() -> bool:
                    return len(await all_messages(rt.store, "t")) == 2

                await eventually(answered, timeout=20)
                thread = await rt.thread("t")
                assert (thread.wait_reason, thread.wait_until) == (None, 0.0), "a commit clears the wait"
                assert (await rt.status()).threads_waiting == 0
            finally:
                rt.stop()
                await running
            history = await all_messages(rt.store, "t")
            assert [(m.role, m.content) for m in history] == [("user", "hello"), ("assistant", "back")]
    finally:
        await model.aclose()
    bodies = [json.dumps(r.body["messages"]) for r in server.received]
    assert bodies == [json.dumps([{"role": "user", "content": "hello"}])] * 2, (
        "the 503 once, then the answer: calls while the breaker is open never reach the server"
    )
