"""The OpenAI-compatible endpoints, driven by the official ``openai`` client."""

from __future__ import annotations

import asyncio
import os

import openai
import pytest

from dormant.agent import Agent
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel, echo_script
from dormant.records import ToolCall
from dormant.tools.spec import tool
from tests.server.support import Served, serve


class Gate:
    """What the async tool waits for; a fresh event per test (events bind to a loop)."""

    release = asyncio.Event()


@pytest.fixture(autouse=True)
def fresh_gate() -> None:
    Gate.release = asyncio.Event()


@tool(mode="async", timeout=30)
async def lookup(city: str) -> str:
    """Look up the weather (answered from outside: the client, in these tests)."""
    await Gate.release.wait()
    return "from the dispatcher"


#: The tool a client declares and runs itself in these tests (the agent's own is ``lookup``).
GET_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


def weather_script(request: ModelRequest) -> ModelReply:
    """Asked about the weather, call the client's ``get_weather`` when the request shows it
    (else the agent's own ``lookup``); given a tool result, answer with it."""
    last = request.messages[-1]
    if last.role == "tool":
        return ModelReply(text=f"weather: {last.content}")
    if "weather" in last.content:
        shown = {t["function"]["name"] for t in request.tools}
        name = "get_weather" if "get_weather" in shown else "lookup"
        call = ToolCall(id=f"call_{os.urandom(4).hex()}", name=name, arguments='{"city": "Paris"}')
        return ModelReply(text="", tool_calls=(call,))
    return echo_script(request)


def agents() -> list[Agent]:
    return [Agent(name="assistant", model=ScriptedModel(weather_script, chunk=3), tools=[lookup])]


def client(s: Served, key: str | None = None) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=key or s.key_a, max_retries=0)


async def test_chat_completion_appends_only_unseen_messages() -> None:
    async with serve(agents()) as s:
        c = client(s)
        first = await c.chat.completions.create(
            model="assistant", user="sess-1", messages=[{"role": "user", "content": "hello"}]
        )
        assert first.choices[0].message.content == "echo: hello"
        assert first.choices[0].finish_reason == "stop"
        assert first.usage is not None and first.usage.total_tokens > 0
        history = [
            {"role": "system", "content": "ignored"},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "echo: hello"},
            {"role": "user", "content": "again"},
        ]
        second = await c.chat.completions.create(model="assistant", user="sess-1", messages=history)  # type: ignore[arg-type]
        assert second.choices[0].message.content == "echo: again"
        async with s.client() as h:
            (thread,) = (await h.get("/v1/threads")).json()["items"]
            texts = [
                m["content"] for m in (await h.get(f"/v1/threads/{thread['id']}/messages")).json()["items"]
            ]
        assert texts == ["hello", "echo: hello", "again", "echo: again"]  # "hello" admitted once
        # a session in a header instead of `user`; a stateless request leaves no thread behind
        r = await c.chat.completions.create(
            model="assistant",
            messages=[{"role": "user", "content": "hdr"}],
            extra_headers={"X-Dormant-Session": "sess-2"},
        )
        assert r.choices[0].message.content == "echo: hdr"
        r = await c.chat.completions.create(model="assistant", messages=[{"role": "user", "content": "once"}])
        assert r.choices[0].message.content == "echo: once"
        async with s.client() as h:
            ids = [t["id"] for t in (await h.get("/v1/threads")).json()["items"]]
        assert len(ids) == 2 and not any(i.startswith("scratch-") for i in ids)


async def test_chat_completion_streams_chunks_with_usage() -> None:
    async with serve(agents()) as s:
        stream = await client(s).chat.completions.create(
            model="assistant",
            user="s",
            messages=[{"role": "user", "content": "stream me"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        pieces: list[str] = []
        finish = None
        usage = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finish = choice.finish_reason or finish
        assert "".join(pieces) == "echo: stream me"
        assert finish == "stop" and usage is not None and usage.completion_tokens > 0


async def test_chat_completion_tool_calls_round_trip() -> None:
    async with serve(agents()) as s:
        c = client(s)
        tools = [GET_WEATHER]
        messages: list[dict[str, object]] = [{"role": "user", "content": "weather?"}]
        r = await c.chat.completions.create(model="assistant", user="w", messages=messages, tools=tools)  # type: ignore[arg-type]
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        call = choice.message.tool_calls[0]
        assert call.function.name == "get_weather"  # type: ignore[union-attr]
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ]
        stream = await c.chat.completions.create(
            model="assistant",
            user="w",
            messages=messages,  # type: ignore[arg-type]
            tools=tools,  # type: ignore[arg-type]
            stream=True,
        )
        assert isinstance(stream, openai.AsyncStream)
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        assert text == "weather: sunny"
        Gate.release.set()


async def test_responses_with_conversation_previous_id_streaming_and_tools() -> None:
    async with serve(agents()) as s:
        c = client(s)
        r1 = await c.responses.create(model="assistant", input="hi")
        assert r1.output_text == "echo: hi" and r1.usage is not None
        r2 = await c.responses.create(model="assistant", input="more", previous_response_id=r1.id)
        assert r2.output_text == "echo: more"
        conv = await c.responses.create(model="assistant", input="in conv", extra_body={"conversation": "c1"})
        assert conv.output_text == "echo: in conv"
        deltas: list[str] = []
        done = None
        stream = await c.responses.create(
            model="assistant", input="streamed", stream=True, extra_body={"conversation": "c1"}
        )
        async for event in stream:
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                done = event.response
        assert (
            "".join(deltas) == "echo: streamed" and done is not None and done.output_text == "echo: streamed"
        )
        tools = [{"type": "function", **GET_WEATHER["function"]}]  # type: ignore[dict-item]
        asked = await c.responses.create(model="assistant", input="weather?", tools=tools)  # type: ignore[arg-type]
        (fc,) = [item for item in asked.output if item.type == "function_call"]
        assert fc.name == "get_weather"
        answered = await c.responses.create(
            model="assistant",
            previous_response_id=asked.id,
            input=[{"type": "function_call_output", "call_id": fc.call_id, "output": "rainy"}],
            tools=tools,  # type: ignore[arg-type]
        )
        assert answered.output_text == "weather: rainy"
        with pytest.raises(openai.NotFoundError):
            await c.responses.create(model="assistant", input="x", previous_response_id="resp_00_1")
        Gate.release.set()


async def test_a_reply_cut_by_the_output_cap_finishes_with_length() -> None:
    """The endpoint says ``length``, not ``stop``, for a reply the cap cut."""
    cut = ScriptedModel(lambda request: ModelReply(text="The answer is", finish_reason="length"))
    async with serve([Agent(name="assistant", model=cut)]) as s:
        c = client(s)
        reply = await c.chat.completions.create(
            model="assistant", user="sess-cut", messages=[{"role": "user", "content": "long question"}]
        )
        assert reply.choices[0].finish_reason == "length"
        assert reply.choices[0].message.content == "The answer is"
