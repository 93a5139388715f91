"""The turn buffer (``collect``) and the scripted model the other tests rely on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence

import pytest

from dormant.errors import ModelError
from dormant.models import Model, ScriptedModel, echo_model, tool_round_trip
from dormant.models.base import (
    Finish,
    ModelEvent,
    ModelReply,
    ModelRequest,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
    collect,
)
from dormant.records import Message, ToolCall


async def events(items: Sequence[ModelEvent]) -> AsyncIterator[ModelEvent]:
    for item in items:
        yield item


def request(*messages: Message) -> ModelRequest:
    return ModelRequest(thread_id="t", system="s", messages=messages)


async def test_collect_joins_text_and_tool_call_pieces() -> None:
    reply = await collect(
        events(
            [
                TextDelta(text="hel"),
                ToolCallDelta(index=1, id="b", name="g", arguments='{"y"'),
                TextDelta(text="lo"),
                ToolCallDelta(index=0, id="a", name="f", arguments="{}"),
                ToolCallDelta(index=1, arguments=": 2}"),
            ]
        )
    )
    assert reply == ModelReply(
        text="hello",
        tool_calls=(
            ToolCall(id="a", name="f", arguments="{}"),
            ToolCall(id="b", name="g", arguments='{"y": 2}'),
        ),
    )


async def test_collect_refuses_a_tool_call_without_a_name() -> None:
    with pytest.raises(ModelError, match="has no name"):
        await collect(events([ToolCallDelta(index=0, arguments="{}")]))


async def test_collect_gives_a_tool_call_without_an_id_a_fresh_one() -> None:
    """A streamed call with no id used to fail the reply, and the thread, for ever."""
    pieces = [ToolCallDelta(index=0, name="f", arguments="{}"), ToolCallDelta(index=1, name="g")]
    first, second = await collect(events(pieces)), await collect(events(pieces))
    ids = [call.id for reply in (first, second) for call in reply.tool_calls]
    assert all(re.fullmatch(r"call_[0-9a-f]{24}", call_id) for call_id in ids)
    assert len(set(ids)) == 4, "fresh every time"
    assert [call.name for call in first.tool_calls] == ["f", "g"]


async def test_collect_keeps_reasoning_finish_reason_and_usage_apart_from_the_answer() -> None:
    reply = await collect(
        events(
            [
                ReasoningDelta(text="think "),
                ReasoningDelta(text="hard"),
                TextDelta(text="answer"),
                Finish(reason="length"),
                Finish(usage=Usage(prompt=10, completion=5, cached=4)),
            ]
        )
    )
    assert reply == ModelReply(
        text="answer",
        reasoning="think hard",
        finish_reason="length",
        usage=Usage(prompt=10, completion=5, cached=4),
    )
    assert reply.cut
    assert not (await collect(events([TextDelta(text="x"), Finish(reason="stop")]))).cut


async def test_collect_is_bounded() -> None:
    with pytest.raises(ModelError, match="exceeds 10 bytes") as info:
        await collect(events([TextDelta(text="x" * 6), TextDelta(text="y" * 6)]), max_bytes=10)
    assert not info.value.retryable


async def test_scripted_model_streams_its_reply_in_chunks() -> None:
    model = ScriptedModel(
        lambda r: ModelReply(text="abcdefg", tool_calls=(ToolCall(id="c", name="f", arguments="{}"),)),
        chunk=3,
    )
    assert isinstance(model, Model)
    pieces = [e async for e in model.stream(request())]
    assert [p.text for p in pieces if isinstance(p, TextDelta)] == ["abc", "def", "g"]
    assert await collect(model.stream(request())) == ModelReply(
        text="abcdefg", tool_calls=(ToolCall(id="c", name="f", arguments="{}"),)
    )


async def test_echo_model_echoes_the_newest_user_text() -> None:
    model = echo_model()
    reply = await collect(
        model.stream(
            request(Message(seq=1, role="user", content="one"), Message(seq=2, role="user", content="two"))
        )
    )
    assert reply.text == "echo: two"
    assert (await collect(model.stream(request()))).text == "echo: (nothing)"


def test_tool_round_trip_calls_then_answers() -> None:
    script = tool_round_trip("lookup", {"q": 1}, "ok", repeat=2)
    first = script(request(Message(seq=1, role="user", content="hi")))
    assert first.text == "okok"
    (call,) = first.tool_calls
    assert (call.name, call.arguments) == ("lookup", '{"q": 1}')
    second = script(
        request(
            Message(seq=1, role="user", content="hi"),
            Message(seq=2, role="assistant", content="", tool_calls=first.tool_calls),
            Message(seq=3, role="tool", content="r", tool_call_id=call.id),
        )
    )
    assert second.tool_calls == () and second.text == "okok"
    third = script(request(Message(seq=1, role="user", content="again")))
    assert third.tool_calls[0].id != call.id, "fresh call ids every turn"
