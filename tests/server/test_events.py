"""Event streams: messages and status live, resumable from the store, live text, slow clients."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from dormant.agent import Agent
from dormant.models import echo_model
from dormant.models.base import ModelEvent, ModelRequest, TextDelta
from dormant.models.scripted import ScriptedModel, echo_script
from dormant.server import ServerConfig
from dormant.server.hub import Hub, Subscriber
from tests.server.support import Event, events, serve


async def collect(stream: AsyncIterator[Event], count: int, kinds: set[str]) -> list[Event]:
    out: list[Event] = []
    async with asyncio.timeout(10):
        async for event in stream:
            if event.event in kinds:
                out.append(event)
                if len(out) == count:
                    break
    return out


async def test_stream_sends_new_messages_then_resumes_from_last_event_id() -> None:
    async with serve([Agent(name="assistant", model=echo_model())]) as s, s.client() as c:
        await c.post("/v1/threads", json={"id": "t"})
        async with c.stream("GET", "/v1/threads/t/events") as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            stream = events(r)
            (status,) = await collect(stream, 1, {"status"})
            assert json.loads(status.data)["status"] == "active"
            await c.post("/v1/threads/t/inputs", json={"content": "one"})
            got = await collect(stream, 2, {"message"})
        assert [e.id for e in got] == ["1", "2"]
        assert json.loads(got[1].data)["content"] == "echo: one"

        await c.post("/v1/threads/t/inputs", json={"content": "two"})  # while disconnected
        async with c.stream("GET", "/v1/threads/t/events", headers={"Last-Event-ID": "2"}) as r:
            replay = await collect(events(r), 2, {"message"})
        assert [e.id for e in replay] == ["3", "4"]
        assert json.loads(replay[1].data)["content"] == "echo: two"

        async with c.stream("GET", "/v1/threads/t/events", params={"after": 3}) as r:
            (only,) = await collect(events(r), 1, {"message"})
        assert only.id == "4"
        bad = await c.get("/v1/threads/t/events", headers={"Last-Event-ID": "x"})
        assert bad.status_code == 400
        assert (await c.get("/v1/threads/nope/events")).status_code == 404


async def test_replay_reads_pages_not_the_whole_history() -> None:
    config = ServerConfig(replay_page=2, poll_s=0.2, heartbeat_s=1.0)
    async with serve([Agent(name="assistant", model=echo_model())], config=config) as s, s.client() as c:
        for i in range(4):
            await c.post("/v1/threads/t/inputs", json={"content": f"m{i}"})
        await asyncio.sleep(0.3)
        calls = 0
        history = s.runtime.history

        async def counting(*args: object, **kwargs: object) -> object:
            nonlocal calls
            calls += 1
            return await history(*args, **kwargs)  # type: ignore[arg-type]

        s.runtime.history = counting  # type: ignore[method-assign,assignment]
        async with c.stream("GET", "/v1/threads/t/events") as r:
            got = await collect(events(r), 8, {"message"})
        assert [int(e.id or 0) for e in got] == list(range(1, 9))
        assert calls >= 4  # four pages of two, at least


async def test_replay_pages_are_bounded_by_bytes_too() -> None:
    config = ServerConfig(replay_page=100, replay_page_bytes=20, poll_s=0.2, heartbeat_s=1.0)
    async with serve([Agent(name="assistant", model=echo_model())], config=config) as s, s.client() as c:
        for i in range(3):
            await c.post("/v1/threads/t/inputs", json={"content": f"message {i}"})
        await asyncio.sleep(0.3)
        sizes: list[int] = []
        history = s.runtime.history

        async def measuring(*args: object, **kwargs: object) -> Any:
            page = await history(*args, **kwargs)  # type: ignore[arg-type]
            sizes.append(sum(len(m.content.encode()) for m in page.items))
            return page

        s.runtime.history = measuring  # type: ignore[method-assign]
        async with c.stream("GET", "/v1/threads/t/events") as r:
            got = await collect(events(r), 6, {"message"})
        assert [int(e.id or 0) for e in got] == list(range(1, 7))
        assert len(sizes) >= 3 and max(sizes) <= 20  # "message i" and "echo: message i" (9 + 15 bytes)


class SlowTalker:
    """A model that streams its reply in pieces, pausing between them."""

    name = "slow"
    context_window = 128_000
    max_output_tokens = 4096
    encoding = "o200k_base"

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        yield TextDelta(text="thinking ")
        await self.gate.wait()
        yield TextDelta(text="done")


async def test_live_text_streams_before_the_commit() -> None:
    model = SlowTalker()
    async with serve([Agent(name="assistant", model=model)]) as s, s.client() as c:
        await c.post("/v1/threads", json={"id": "t"})
        async with c.stream("GET", "/v1/threads/t/events") as r:
            stream = events(r)
            await collect(stream, 1, {"status"})
            await c.post("/v1/threads/t/inputs", json={"content": "go"})
            (delta,) = await collect(stream, 1, {"delta"})
            assert json.loads(delta.data) == {"text": "thinking "}
            assert delta.id == "0:9"  # nothing durable yet; offset 9 characters
            model.gate.set()
            got = await collect(stream, 2, {"message"})
        assert json.loads(got[1].data)["content"] == "thinking done"


def test_a_subscriber_over_its_byte_cap_is_dropped_with_a_reason() -> None:
    sub = Subscriber("t", queue_bytes=10)
    sub.push("12345")
    sub.push("67890")
    assert sub.dropped is None and sub.queued_bytes == 10
    sub.push("x")
    assert sub.dropped is not None and "slow client" in sub.dropped
    assert sub.queued_bytes == 0 and sub.take() == []


async def test_hub_is_bounded_in_subscribers_and_forgets_threads_nobody_watches() -> None:
    async def read(thread_id: str) -> object:
        raise AssertionError("not polled here")

    hub = Hub(read, max_subscribers=1, queue_bytes=100)  # type: ignore[arg-type]
    async with hub.subscribe("a") as sub:
        hub.delta("a", TextDelta(text="hi"))
        hub.delta("b", TextDelta(text="nobody"))
        assert sub.take() == ["hi"] and sub.wake.is_set()
        try:
            async with hub.subscribe("b"):
                raise AssertionError("a second subscriber fit")
        except Exception as exc:
            assert type(exc).__name__ == "Overloaded"
    assert hub.subscribers == 0 and not hub._subs


async def test_slow_client_is_dropped_and_the_slice_is_not_slowed() -> None:
    model = ScriptedModel(echo_script, chunk=1)  # one event per character
    config = ServerConfig(stream_queue_bytes=8, poll_s=0.2, heartbeat_s=1.0)
    async with serve([Agent(name="assistant", model=model)], config=config) as s, s.client() as c:
        await c.post("/v1/threads", json={"id": "t"})
        async with c.stream("GET", "/v1/threads/t/events") as r:
            stream = events(r)
            await collect(stream, 1, {"status"})
            await c.post("/v1/threads/t/inputs", json={"content": "x" * 100})
            (error,) = await collect(stream, 1, {"error"})
        assert json.loads(error.data)["code"] == "slow_client"
        page = (await c.get("/v1/threads/t/messages")).json()
        assert page["items"][-1]["content"] == "echo: " + "x" * 100  # the slice committed


async def test_streams_end_when_the_server_stops() -> None:
    async with serve([Agent(name="assistant", model=echo_model())]) as s, s.client() as c:
        await c.post("/v1/threads", json={"id": "t"})
        async with c.stream("GET", "/v1/threads/t/events") as r:
            stream = events(r)
            await collect(stream, 1, {"status"})
            s.app.state.server.hub.close()
            (error,) = await collect(stream, 1, {"error"})
        assert json.loads(error.data)["code"] == "shutting_down"
