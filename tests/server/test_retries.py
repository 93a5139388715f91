"""Retries are free and concurrent duplicates are one; Idempotency-Key like payment APIs."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable

import httpx
import openai

from dormant.agent import Agent
from dormant.models.base import ModelEvent, ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.server import ServerConfig
from tests.server.support import serve

#: How long one turn of the slow agent takes.
TURN_S = 0.8


class SlowModel(ScriptedModel):
    """A scripted model that takes ``delay_s`` before each reply."""

    def __init__(self, script: Callable[[ModelRequest], ModelReply], delay_s: float) -> None:
        super().__init__(script)
        self.delay_s = delay_s

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        await asyncio.sleep(self.delay_s)
        async for event in super().stream(request):
            yield event


class Slow:
    """Replies in TURN_S and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def script(self, request: ModelRequest) -> ModelReply:
        self.calls += 1
        return ModelReply(text=f"reply {self.calls}: {request.messages[-1].content}")


def slow_agent(slow: Slow, delay_s: float = TURN_S) -> list[Agent]:
    return [Agent(name="assistant", model=SlowModel(slow.script, delay_s))]


CHAT = {"model": "assistant", "user": "alice", "messages": [{"role": "user", "content": "hello"}]}


async def test_a_retried_chat_request_answers_the_stored_reply_at_once() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s, s.client() as h:
        first = await h.post("/v1/chat/completions", json=CHAT)
        assert first.status_code == 200
        began = time.perf_counter()
        again = await h.post("/v1/chat/completions", json=CHAT)
        took = time.perf_counter() - began
        assert again.status_code == 200, again.text
        assert again.json()["choices"][0]["message"] == first.json()["choices"][0]["message"]
        assert took < 0.1, f"the retry took {took * 1000:.0f} ms"
        assert slow.calls == 1


async def test_twenty_identical_concurrent_requests_share_one_turn() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s, s.client() as h:
        began = time.perf_counter()
        replies = await asyncio.gather(*(h.post("/v1/chat/completions", json=CHAT) for _ in range(20)))
        took = time.perf_counter() - began
        assert [r.status_code for r in replies] == [200] * 20
        texts = {r.json()["choices"][0]["message"]["content"] for r in replies}
        assert texts == {"reply 1: hello"} and slow.calls == 1
        assert took < TURN_S * 3, f"20 identical requests took {took:.2f} s (one turn: {TURN_S} s)"
        assert len(s.app.state.server.flights) == 0  # the shared waits are gone once answered
        assert s.app.state.server.flights.joined >= 1


async def test_the_official_client_retrying_a_lost_reply_gets_the_same_answer() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s:
        impatient = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0, timeout=0.3)
        with contextlib.suppress(openai.APITimeoutError):  # the client gave up; the turn goes on
            await impatient.chat.completions.create(**CHAT)  # type: ignore[call-overload]
        patient = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=2)
        reply = await patient.chat.completions.create(**CHAT)  # type: ignore[call-overload]
        assert reply.choices[0].message.content == "reply 1: hello" and slow.calls == 1


async def test_a_disconnected_client_stops_the_wait_and_the_turn_commits() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s:
        async with s.client() as h:
            with contextlib.suppress(httpx.TimeoutException):
                await h.post("/v1/chat/completions", json=CHAT, timeout=0.2)
        await asyncio.sleep(TURN_S + 0.5)
        assert len(s.app.state.server.flights) == 0
        assert s.app.state.server.hub.subscribers == 0  # nobody waits on the thread any more
        async with s.client() as h:
            (thread,) = (await h.get("/v1/threads")).json()["items"]
            page = (await h.get(f"/v1/threads/{thread['id']}/messages")).json()["items"]
        assert [m["content"] for m in page] == ["hello", "reply 1: hello"]


async def test_shutdown_answers_waiting_requests_at_once() -> None:
    slow = Slow()
    agents = slow_agent(slow, delay_s=5.0)
    async with serve(agents, config=ServerConfig(poll_s=0.2, reply_timeout_s=60)) as s, s.client() as h:
        waiting = asyncio.create_task(h.post("/v1/chat/completions", json=CHAT))
        await asyncio.sleep(0.5)
        began = time.perf_counter()
        s.app.state.server.hub.close()  # what SIGTERM does first (dormant.server.main)
        r = await waiting
        assert time.perf_counter() - began < 1.0
        assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down"
        assert "Retry-After" in r.headers


async def test_a_responses_continuation_appends_once_without_a_key() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s:
        c = openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)
        first = await c.responses.create(model="assistant", input="hi")
        a = await c.responses.create(model="assistant", input="more", previous_response_id=first.id)
        b = await c.responses.create(model="assistant", input="more", previous_response_id=first.id)
        assert a.id == b.id and a.output_text == b.output_text == "reply 2: more"
        items = await c.responses.input_items.list(a.id)
        assert [i.model_dump()["content"][0]["text"] for i in items.data] == ["more"]
        assert slow.calls == 2


async def test_the_same_idempotency_key_with_another_body_is_refused_on_every_route() -> None:
    slow = Slow()
    async with serve(slow_agent(slow)) as s, s.client() as h:
        key = {"Idempotency-Key": "order-17"}
        first = await h.post("/v1/threads/t1/inputs", json={"content": "pay 10"}, headers=key)
        same = await h.post("/v1/threads/t1/inputs", json={"content": "pay 10"}, headers=key)
        assert first.status_code == same.status_code == 202 and same.json()["duplicate"]
        other = await h.post("/v1/threads/t1/inputs", json={"content": "pay 99"}, headers=key)
        assert other.status_code == 422
        error = other.json()["error"]
        assert error["code"] == "idempotency_mismatch" and "order-17" in error["message"]
        page = (await h.get("/v1/threads/t1/messages")).json()["items"]
        assert "pay 99" not in [m["content"] for m in page]
        # the Responses route: the same key and body answer the stored reply; another body is 422
        body = {"model": "assistant", "input": "hello", "conversation": "c1"}
        r1 = await h.post("/v1/responses", json=body, headers={"Idempotency-Key": "r-1"})
        r2 = await h.post("/v1/responses", json=body, headers={"Idempotency-Key": "r-1"})
        assert r1.status_code == r2.status_code == 200 and r1.json()["id"] == r2.json()["id"]
        r3 = await h.post("/v1/responses", json={**body, "input": "bye"}, headers={"Idempotency-Key": "r-1"})
        assert r3.status_code == 422
        assert r3.json()["error"]["code"] == "idempotency_mismatch" and "r-1" in r3.json()["error"]["message"]
        assert r3.json()["error"]["type"] == "invalid_request_error"  # the OpenAI shape
        assert slow.calls == 2
