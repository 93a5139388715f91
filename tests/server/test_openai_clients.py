"""OpenAI compatibility as third-party clients rely on it: the official ``openai`` client
and langchain-openai's ``ChatOpenAI``, pointed at the server's ``/v1``."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from dormant.agent import Agent
from dormant.models.scripted import ScriptedModel
from tests.server.support import Served, serve
from tests.server.test_openai import GET_WEATHER, Gate, lookup, weather_script

__all__ = ["Gate"]


def agents() -> list[Agent]:
    return [
        Agent(name="assistant", model=ScriptedModel(weather_script, chunk=3), tools=[lookup]),
        Agent(name="second", model=ScriptedModel(weather_script)),
    ]


def client(s: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)


async def test_models_list_the_agents_and_an_unknown_model_is_model_not_found() -> None:
    async with serve(agents()) as s:
        c = client(s)
        assert [m.id async for m in c.models.list()] == ["assistant", "second"]
        assert (await c.models.retrieve("second")).id == "second"
        with pytest.raises(openai.NotFoundError) as caught:
            await c.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
        body = caught.value.body
        assert isinstance(body, dict) and body["code"] == "model_not_found"
        assert set(body) == {"message", "type", "param", "code"}
        with pytest.raises(openai.NotFoundError):
            await c.responses.create(model="gpt-4o", input="hi")
        with pytest.raises(openai.AuthenticationError):
            await openai.AsyncOpenAI(base_url=s.url + "/v1", api_key="bad", max_retries=0).models.list()


async def test_parts_the_agent_cannot_take_are_refused_never_dropped() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    audio = {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
    with_image: Any = [{"role": "user", "content": [{"type": "text", "text": "what is it?"}, image]}]
    with_audio: Any = [{"role": "user", "content": [audio]}]
    responses_image: Any = [
        {"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}
    ]
    async with serve(agents()) as s:
        c = client(s)
        with pytest.raises(openai.APIStatusError, match="not an image") as bad:  # not a PNG
            await c.chat.completions.create(model="assistant", user="u", messages=with_image)
        assert bad.value.status_code == 415
        with pytest.raises(openai.BadRequestError, match="input_audio"):
            await c.chat.completions.create(model="assistant", messages=with_audio)
        with pytest.raises(openai.BadRequestError, match="fetches no URLs"):
            await c.responses.create(model="assistant", input=responses_image)
        async with s.client() as h:
            assert (await h.get("/v1/threads")).json()["items"] == []  # nothing was admitted


async def test_responses_retrieve_input_items_and_delete() -> None:
    async with serve(agents()) as s:
        c = client(s)
        first = await c.responses.create(model="assistant", input="hi")
        second = await c.responses.create(model="assistant", input="more", previous_response_id=first.id)
        got = await c.responses.retrieve(second.id)
        assert got.id == second.id and got.output_text == "echo: more" and got.status == "completed"
        items = await c.responses.input_items.list(second.id)
        assert [i.model_dump()["content"][0]["text"] for i in items.data] == ["more"]
        for one_of_two in (first.id, second.id):  # never deleted with the other turn
            with pytest.raises(openai.BadRequestError, match="longer conversation"):
                await c.responses.delete(one_of_two)
        assert (await c.responses.retrieve(first.id)).output_text == "echo: hi"
        alone = await c.responses.create(model="assistant", input="just once")
        await c.responses.delete(alone.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(alone.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve("resp_zz_1")
        async with s.client(s.key_b) as other:  # another tenant's id is no response of its own
            third = await c.responses.create(model="assistant", input="mine")
            r = await other.get(f"/v1/responses/{third.id}")
            assert r.status_code == 404 and r.json()["error"]["type"] == "invalid_request_error"


def chat_model(s: Served, session: str = "lc-1") -> ChatOpenAI:
    return ChatOpenAI(
        model="assistant",
        base_url=s.url + "/v1",
        api_key=s.key_a,  # type: ignore[arg-type]
        max_retries=2,
        default_headers={"X-Dormant-Session": session},
    )


async def test_langchain_chat_openai_multi_turn_streaming_tools_and_retries() -> None:
    async with serve(agents()) as s:
        llm = chat_model(s)
        first = await llm.ainvoke([HumanMessage("hello")])
        assert first.content == "echo: hello"
        history = [HumanMessage("hello"), first, HumanMessage("again")]
        second = await llm.ainvoke(history)
        assert second.content == "echo: again"
        retried = await llm.ainvoke(history)  # the same request again: the stored answer
        assert retried.content == "echo: again"
        follow = [*history, second, HumanMessage("more")]
        streamed = "".join([str(chunk.content) async for chunk in llm.astream(follow)])
        assert streamed == "echo: more"
        async with s.client() as h:
            (thread,) = (await h.get("/v1/threads")).json()["items"]
            page = (await h.get(f"/v1/threads/{thread['id']}/messages")).json()["items"]
            texts = [m["content"] for m in page]
        assert texts == ["hello", "echo: hello", "again", "echo: again", "more", "echo: more"]
        # tools: the call ends the turn with tool_calls; the client's tool message answers it
        with_tools = chat_model(s, "lc-tools").bind_tools([GET_WEATHER])
        asked = await with_tools.ainvoke([HumanMessage("weather?")])
        assert (
            isinstance(asked, AIMessage) and asked.tool_calls and asked.tool_calls[0]["name"] == "get_weather"
        )
        call_id = asked.tool_calls[0]["id"]
        assert call_id is not None
        answered = await with_tools.ainvoke(
            [HumanMessage("weather?"), asked, ToolMessage("sunny", tool_call_id=call_id)]
        )
        assert answered.content == "weather: sunny"
        Gate.release.set()


async def test_langchain_gets_a_clear_error_for_an_unknown_model() -> None:
    async with serve(agents()) as s:
        llm = ChatOpenAI(model="gpt-4o", base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)  # type: ignore[arg-type]
        with pytest.raises(openai.NotFoundError, match="gpt-4o"):
            await llm.ainvoke([HumanMessage("hi")])


async def test_langchain_bind_tools_streaming_and_a_retried_tool_answer() -> None:
    """``bind_tools`` with a tool the client runs: the call streams back, the client's
    ToolMessage answers it, a retry of that answer is appended once."""
    async with serve(agents()) as s:
        with_tools = chat_model(s, "lc-stream-tools").bind_tools([GET_WEATHER])
        chunks = [chunk async for chunk in with_tools.astream([HumanMessage("weather today?")])]
        asked = chunks[0]
        for more in chunks[1:]:
            asked = asked + more  # type: ignore[assignment]
        assert isinstance(asked, AIMessage) and [c["name"] for c in asked.tool_calls] == ["get_weather"]
        call_id = asked.tool_calls[0]["id"]
        assert call_id is not None
        conversation = [HumanMessage("weather today?"), asked, ToolMessage("cloudy", tool_call_id=call_id)]
        streamed = "".join([str(chunk.content) async for chunk in with_tools.astream(conversation)])
        assert streamed == "weather: cloudy"
        retried = await with_tools.ainvoke(conversation)
        assert retried.content == "weather: cloudy"
        async with s.client() as h:
            (thread,) = (await h.get("/v1/threads")).json()["items"]
            page = (await h.get(f"/v1/threads/{thread['id']}/messages")).json()["items"]
        assert [m["content"] for m in page if m["role"] == "tool"] == ["cloudy"]
        assert thread["awaiting"] == 0
