"""Client tools on the OpenAI-compatible endpoints, driven by the official ``openai`` client.

The client declares ``get_weather`` and runs it itself; the agent (a ScriptedModel) has
its own async tool ``lookup``. The model sees both; a call to ``get_weather`` ends the
answer with ``tool_calls`` (a ``function_call`` item) and waits, durably, for the
client's answer, which no dispatcher gives.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from dormant.agent import Agent
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from tests.server.support import Served, serve
from tests.server.test_openai import GET_WEATHER, Gate, lookup, weather_script

__all__ = ["Gate"]

#: The tool names each model request showed, in order (what the model saw).
SEEN: list[set[str]] = []


def seeing_script(request: ModelRequest) -> ModelReply:
    SEEN.append({t["function"]["name"] for t in request.tools})
    return weather_script(request)


@pytest.fixture(autouse=True)
def fresh_seen() -> None:
    SEEN.clear()


def agents() -> list[Agent]:
    return [Agent(name="assistant", model=ScriptedModel(seeing_script, chunk=3), tools=[lookup])]


def client(s: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)


async def thread_of(s: Served, session_header: dict[str, str] | None = None) -> dict[str, Any]:
    async with s.client() as h:
        (thread,) = (await h.get("/v1/threads")).json()["items"]
        return dict(thread)


async def messages_of(s: Served, thread_id: str) -> list[dict[str, Any]]:
    async with s.client() as h:
        return list((await h.get(f"/v1/threads/{thread_id}/messages?limit=200")).json()["items"])


async def test_chat_client_tools_reach_the_model_and_the_tool_message_answers_the_call() -> None:
    async with serve(agents()) as s:
        c = client(s)
        messages: list[Any] = [{"role": "user", "content": "weather?"}]
        asked = await c.chat.completions.create(
            model="assistant",
            user="alice",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
        )
        assert {"lookup", "get_weather"} <= SEEN[-1], "the model saw the client's tool beside its own"
        choice = asked.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.tool_calls
        (call,) = choice.message.tool_calls
        assert call.function.name == "get_weather" and call.function.arguments == '{"city": "Paris"}'  # type: ignore[union-attr]
        thread = await thread_of(s)
        assert thread["awaiting"] == 1, "a visible wait"
        async with s.client() as h:
            status = (await h.get("/v1/status")).json()
        assert status["outbox_by_status"].get("external") == 1
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ]
        answered = await c.chat.completions.create(
            model="assistant",
            user="alice",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
        )
        assert answered.choices[0].finish_reason == "stop"
        assert answered.choices[0].message.content == "weather: sunny"
        # a retry of the same answer is harmless: the stored answer, one tool message
        again = await c.chat.completions.create(
            model="assistant",
            user="alice",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
        )
        assert again.choices[0].message.content == "weather: sunny"
        history = await messages_of(s, thread["id"])
        assert [(m["role"], m["content"]) for m in history if m["role"] == "tool"] == [("tool", "sunny")]
        assert [m["content"] for m in history if m["role"] == "assistant"][-1] == "weather: sunny"
        assert (await thread_of(s))["awaiting"] == 0
        # the next turn: multi-turn on the same session, the tools still shown
        messages += [
            {"role": "assistant", "content": "weather: sunny"},
            {"role": "user", "content": "thanks"},
        ]
        last = await c.chat.completions.create(
            model="assistant",
            user="alice",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
        )
        assert last.choices[0].message.content == "echo: thanks" and "get_weather" in SEEN[-1]


async def test_chat_streaming_ends_with_the_call_and_streams_the_answer() -> None:
    async with serve(agents()) as s:
        c = client(s)
        messages: list[Any] = [{"role": "user", "content": "weather please"}]
        stream = await c.chat.completions.create(
            model="assistant",
            user="bob",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
            stream=True,
        )
        assert isinstance(stream, openai.AsyncStream)
        calls: list[Any] = []
        finish = None
        async for chunk in stream:
            for choice in chunk.choices:
                calls += choice.delta.tool_calls or []
                finish = choice.finish_reason or finish
        assert finish == "tool_calls" and [x.function.name for x in calls] == ["get_weather"]
        call = calls[0]
        messages += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call.id, "type": "function", "function": call.function.model_dump()}],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "foggy"},
        ]
        stream = await c.chat.completions.create(
            model="assistant",
            user="bob",
            messages=messages,
            tools=[GET_WEATHER],  # type: ignore[list-item]
            stream=True,
        )
        assert isinstance(stream, openai.AsyncStream)
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])
        assert text == "weather: foggy"


async def test_the_rest_route_answers_a_client_call_too() -> None:
    async with serve(agents()) as s:
        c = client(s)
        asked = await c.chat.completions.create(
            model="assistant",
            user="carol",
            messages=[{"role": "user", "content": "weather?"}],
            tools=[GET_WEATHER],  # type: ignore[list-item]
        )
        (call,) = asked.choices[0].message.tool_calls or []
        thread = await thread_of(s)
        async with s.client() as h:
            url = f"/v1/threads/{thread['id']}/tool_results/{call.id}"
            first = await h.post(url, json={"content": "windy"})
            again = await h.post(url, json={"content": "windy"})
        assert first.status_code == 202 and again.status_code == 202 and again.json()["duplicate"] is True
        history = await _settled(s, thread["id"])
        assert [m["content"] for m in history if m["role"] == "tool"] == ["windy"]
        assert history[-1]["content"] == "weather: windy"


async def _settled(s: Served, thread_id: str) -> list[dict[str, Any]]:
    import asyncio

    for _ in range(200):
        history = await messages_of(s, thread_id)
        if history and history[-1]["role"] == "assistant" and not history[-1].get("tool_calls"):
            return history
        await asyncio.sleep(0.02)
    raise AssertionError("the turn did not end")


async def test_responses_function_call_and_function_call_output() -> None:
    async with serve(agents()) as s:
        c = client(s)
        tools: Any = [{"type": "function", **GET_WEATHER["function"]}]  # type: ignore[dict-item]
        asked = await c.responses.create(model="assistant", input="weather?", tools=tools)
        assert {"lookup", "get_weather"} <= SEEN[-1]
        (fc,) = [item for item in asked.output if item.type == "function_call"]
        assert fc.name == "get_weather" and fc.arguments == '{"city": "Paris"}' and fc.call_id
        answer: Any = [{"type": "function_call_output", "call_id": fc.call_id, "output": "hail"}]
        answered = await c.responses.create(
            model="assistant", previous_response_id=asked.id, input=answer, tools=tools
        )
        assert answered.output_text == "weather: hail"
        retried = await c.responses.create(
            model="assistant", previous_response_id=asked.id, input=answer, tools=tools
        )
        assert retried.output_text == "weather: hail"
        thread = await thread_of(s)
        history = await messages_of(s, thread["id"])
        assert [m["content"] for m in history if m["role"] == "tool"] == ["hail"]
        # streamed: the function_call item comes in the event sequence
        stream = await c.responses.create(
            model="assistant",
            input="weather again?",
            previous_response_id=answered.id,
            tools=tools,
            stream=True,
        )
        items = [e.item for e in [e async for e in stream] if e.type == "response.output_item.done"]
        assert [i.name for i in items if i.type == "function_call"] == ["get_weather"]


async def test_refused_declarations_write_nothing() -> None:
    async with serve(agents()) as s:
        c = client(s)
        clash: Any = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
        with pytest.raises(openai.BadRequestError, match=r"lookup.*own tools"):
            await c.chat.completions.create(
                model="assistant", user="d", messages=[{"role": "user", "content": "hi"}], tools=clash
            )
        bad_name: Any = [{"type": "function", "function": {"name": "get weather!"}}]
        with pytest.raises(openai.BadRequestError, match=r"tools\.0\.function\.name"):
            await c.chat.completions.create(
                model="assistant", user="d", messages=[{"role": "user", "content": "hi"}], tools=bad_name
            )
        not_object: Any = [{"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}]
        with pytest.raises(openai.BadRequestError, match="parameters"):
            await c.chat.completions.create(
                model="assistant", user="d", messages=[{"role": "user", "content": "hi"}], tools=not_object
            )
        too_many: Any = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]
        with pytest.raises(openai.BadRequestError, match="at most 128"):
            await c.chat.completions.create(
                model="assistant", user="d", messages=[{"role": "user", "content": "hi"}], tools=too_many
            )
        huge: Any = [
            {"type": "function", "function": {"name": f"f{i}", "description": "x" * 4000}} for i in range(20)
        ]
        with pytest.raises(openai.BadRequestError, match="bytes"):
            await c.chat.completions.create(
                model="assistant", user="d", messages=[{"role": "user", "content": "hi"}], tools=huge
            )
        with pytest.raises(openai.BadRequestError, match="needs a session"):
            await c.chat.completions.create(
                model="assistant",
                messages=[{"role": "user", "content": "hi"}],
                tools=[GET_WEATHER],  # type: ignore[list-item]
            )
        builtin: Any = [{"type": "web_search_preview"}]
        with pytest.raises(openai.BadRequestError, match="web_search_preview"):
            await c.responses.create(model="assistant", input="hi", tools=builtin)
        async with s.client() as h:
            assert (await h.get("/v1/threads")).json()["items"] == []


async def test_without_client_tools_the_agents_own_call_is_not_handed_to_the_client() -> None:
    """Only the client's tools end a turn with tool_calls: the agent's async ``lookup``
    runs in its dispatcher and the answer comes back with its result."""
    async with serve(agents()) as s:
        c = client(s)
        Gate.release.set()
        reply = await c.chat.completions.create(
            model="assistant", user="erin", messages=[{"role": "user", "content": "weather?"}]
        )
        assert reply.choices[0].finish_reason == "stop"
        assert reply.choices[0].message.content == "weather: from the dispatcher"
