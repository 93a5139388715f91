"""The façade tells the truth: one response id through a Responses stream (the official
client's ``responses.stream()`` checks it), and usage as the model server counted it."""

from __future__ import annotations

import openai

from dormant.agent import Agent
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.records import Usage
from tests.server.support import Served, serve


def counted(request: ModelRequest) -> ModelReply:
    """Echo, reporting the usage a server would: the whole view it read, not the new message."""
    seen = sum(len(m.content) for m in request.messages) + len(request.system)
    return ModelReply(
        text=f"echo: {request.messages[-1].content}", usage=Usage(prompt=1000 + seen, completion=7)
    )


def agents() -> list[Agent]:
    return [Agent(name="assistant", model=ScriptedModel(counted, chunk=4), system_prompt="You help.")]


def client(s: Served) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=s.url + "/v1", api_key=s.key_a, max_retries=0)


async def test_the_official_responses_stream_keeps_one_response_id() -> None:
    async with serve(agents()) as s:
        c = client(s)
        async with c.responses.stream(model="assistant", input="hello there") as stream:
            kinds = [event.type async for event in stream]
            final = await stream.get_final_response()
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert final.output_text == "echo: hello there"
        stored = await c.responses.retrieve(final.id)
        assert stored.id == final.id and stored.output_text == "echo: hello there"
        # the id continues the conversation
        again = await c.responses.create(model="assistant", input="and more", previous_response_id=final.id)
        assert again.output_text == "echo: and more"
        async with c.responses.stream(
            model="assistant", input="third", previous_response_id=again.id
        ) as stream:
            third = await stream.get_final_response()
        assert third.id not in (final.id, again.id), "each response has its own id"


async def test_usage_is_what_the_model_read() -> None:
    async with serve(agents()) as s:
        c = client(s)
        first = await c.chat.completions.create(
            model="assistant", user="u1", messages=[{"role": "user", "content": "hello"}]
        )
        assert first.usage is not None
        assert first.usage.prompt_tokens >= 1000, "the model's own count of its whole prompt"
        assert first.usage.completion_tokens == 7
        extra = first.usage.model_extra or {}
        assert 0 < extra["added_tokens"] < 10, "the added message alone, as an extra field"
        response = await c.responses.create(model="assistant", input="hi")
        assert response.usage is not None and response.usage.input_tokens >= 1000
