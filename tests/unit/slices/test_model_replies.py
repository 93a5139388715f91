"""What a model server says about a reply, in the pure parts: the slice keeps
usage, finish reason and reasoning on the assistant message and sums usage over the
slice; a cut reply is continued from a request the slice builds; reasoning goes back to
the server only in the field its dialect names (exact request bodies on the loopback
server); callers see it all (HTTP JSON, ``dormant show``, ``dormant status``)."""

from __future__ import annotations

import msgspec
import pytest
from rich.console import Console

from dormant.agent import MAX_CONTINUATIONS, Agent
from dormant.cli.history import message_text, thread_line
from dormant.cli.status import model_rows
from dormant.errors import UsageError
from dormant.models.base import ModelReply, collect
from dormant.models.scripted import ScriptedModel, echo_model
from dormant.models.wire import DIALECTS, wire_messages
from dormant.records import (
    Input,
    Message,
    Priority,
    SliceLoad,
    StoreStatus,
    Thread,
    ToolCall,
    Usage,
    ViewLimits,
)
from dormant.server.schemas import MessageOut, StatusOut, ThreadOut
from dormant.slices.step import CONTINUE, Turn
from dormant.tenants.scope import Scope
from dormant.tools.spec import ToolBox
from dormant.view.builder import clip, message_bytes
from tests.openai_server import (
    ScriptServer,
    fresh_breakers,
    make_model,
    make_request,
    no_env_key,
    run,
    server,
    text_reply,
)

__all__ = ["fresh_breakers", "no_env_key", "server"]  # fixtures, used by name

NOW = 1_700_000_000.0


def turn(summary_usage: Usage | None = None, limits: ViewLimits | None = None) -> Turn:
    item = Input(
        id=1,
        thread_id="t1",
        kind="user",
        dedup_key="k1",
        content="hello",
        priority=Priority.P1,
        not_before=0.0,
        admitted_at=NOW,
    )
    load = SliceLoad(thread=Thread(id="t1", agent="a"), view=(), inputs=(item,))
    return Turn(
        load,
        token="tok",
        system="",
        tools=ToolBox([]),
        max_rounds=4,
        now=NOW,
        usage=summary_usage,
        limits=limits,
    )


def test_the_assistant_message_keeps_usage_finish_reason_and_reasoning() -> None:
    t = turn()
    t.on_reply(
        ModelReply(
            text="hi",
            finish_reason="length",
            reasoning="think",
            usage=Usage(prompt=9, completion=2, cached=4),
        )
    )
    message = t.plan().messages[-1]
    assert (message.content, message.finish_reason, message.reasoning, message.cut) == (
        "hi",
        "length",
        "think",
        True,
    )
    assert message.usage == Usage(prompt=9, completion=2, cached=4)


def test_a_reply_without_reasoning_or_usage_stores_none() -> None:
    t = turn()
    t.on_reply(ModelReply(text="hi"))
    plan = t.plan()
    assert (plan.messages[-1].reasoning, plan.messages[-1].usage, plan.usage) == (None, None, None)


def test_the_plan_sums_the_usage_of_every_call_of_the_slice_compaction_included() -> None:
    t = turn(summary_usage=Usage(prompt=1000, completion=100))
    t.on_reply(
        ModelReply(
            text="",
            tool_calls=(ToolCall(id="c1", name="nope", arguments="{}"),),
            usage=Usage(prompt=10, completion=1, cached=8),
        )
    )
    t.on_reply(ModelReply(text="done", usage=Usage(prompt=20, completion=2, cached=16)))
    assert t.plan().usage == Usage(prompt=1030, completion=103, cached=24)


def test_a_continuation_request_shows_the_cut_reply_then_asks_to_go_on() -> None:
    t = turn(limits=ViewLimits())
    request = t.continuation(ModelReply(text="The answer", finish_reason="length"))
    assert [(m.role, m.content) for m in request.messages] == [
        ("user", "hello"),
        ("assistant", "The answer"),
        ("user", CONTINUE),
    ]
    assert [(m.role, m.content) for m in t.plan().messages] == [("user", "hello")], "nothing of it stored"


def test_then_joins_a_cut_reply_and_its_continuation() -> None:
    first = ModelReply(
        text="one ", finish_reason="length", reasoning="a", usage=Usage(prompt=5, completion=5)
    )
    more = ModelReply(
        text="two",
        tool_calls=(ToolCall(id="c", name="f", arguments="{}"),),
        finish_reason="tool_calls",
        reasoning="b",
        usage=Usage(prompt=10, completion=1, cached=5),
    )
    joined = first.then(more)
    assert (joined.text, joined.reasoning, joined.finish_reason, joined.tool_calls) == (
        "one two",
        "ab",
        "tool_calls",
        more.tool_calls,
    )
    assert joined.usage == Usage(prompt=15, completion=6, cached=5)
    assert ModelReply(text="x", finish_reason="length").then(ModelReply(text="y")).usage is None


def test_max_continuations_is_bounded() -> None:
    model = echo_model()
    assert (
        Agent(name="a", model=model, max_continuations=MAX_CONTINUATIONS).max_continuations
        == MAX_CONTINUATIONS
    )
    for bad in (-1, MAX_CONTINUATIONS + 1):
        with pytest.raises(UsageError, match="max_continuations"):
            Agent(name="a", model=model, max_continuations=bad)


async def test_the_scripted_model_streams_reasoning_finish_and_usage() -> None:
    said = ModelReply(text="hi", finish_reason="length", reasoning="r", usage=Usage(prompt=3, completion=1))
    model = ScriptedModel(lambda request: said)
    assert await collect(model.stream(make_request())) == said


def test_reasoning_is_never_sent_back_unless_the_dialect_names_a_field() -> None:
    messages = (
        Message(seq=1, role="user", content="q"),
        Message(seq=2, role="assistant", content="a", reasoning="thought"),
        Message(seq=3, role="user", content="q2"),
    )
    request = make_request(*messages)
    for name in ("generic", "openai", "mistral", "strict"):
        assert "thought" not in msgspec.json.encode(wire_messages(request, DIALECTS[name])).decode()
    assert wire_messages(request, DIALECTS["reasoning"])[1] == {
        "role": "assistant",
        "content": "a",
        "reasoning_content": "thought",
    }


async def test_the_request_body_carries_reasoning_only_in_the_dialects_field(server: ScriptServer) -> None:
    call = ToolCall(id="call_1.2.0", name="f", arguments="{}")
    request = make_request(
        Message(seq=1, role="user", content="q"),
        Message(seq=2, role="assistant", content="", tool_calls=(call,), reasoning="plan the call"),
        Message(seq=3, role="tool", content="42", tool_call_id="call_1.2.0", name="f"),
    )
    server.script(text_reply("x"), text_reply("y"))
    await run(make_model(server), request)
    await run(make_model(server, dialect="reasoning"), request)
    plain, wanted = (r.body["messages"] for r in server.received)
    assert plain[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert wanted[1] == {**plain[1], "reasoning_content": "plan the call"}
    assert plain[0] == wanted[0] and plain[2] == wanted[2]


def test_reasoning_counts_in_a_messages_size_and_is_dropped_first_when_clipped() -> None:
    plain = Message(seq=1, role="assistant", content="answer")
    thinking = msgspec.structs.replace(plain, reasoning="x" * 100)
    assert message_bytes(thinking) == message_bytes(plain) + 100
    limits = ViewLimits(max_bytes=4096, max_tokens=100_000)
    huge = msgspec.structs.replace(plain, reasoning="x" * 10_000)
    assert clip(huge, limits) == plain, "shown without its reasoning, its answer whole"


def test_callers_see_cut_finish_reason_reasoning_and_usage_over_http() -> None:
    message = Message(
        seq=2,
        role="assistant",
        content="The answer",
        finish_reason="length",
        reasoning="hmm",
        usage=Usage(prompt=10, completion=4096, cached=8),
    )
    out = MessageOut.of(message).model_dump()
    assert {k: out[k] for k in ("finish_reason", "cut", "reasoning", "usage")} == {
        "finish_reason": "length",
        "cut": True,
        "reasoning": "hmm",
        "usage": {"prompt": 10, "completion": 4096, "cached": 8},
    }
    scope = Scope("t0123456789ab")
    thread = Thread(
        id="t0123456789ab/t1",
        agent="a",
        usage_prompt=10,
        usage_completion=4096,
        usage_cached=8,
        wait_reason="circuit open",
        wait_until=NOW,
    )
    info = ThreadOut.of(thread, scope).model_dump()
    assert info["usage"] == {"prompt": 10, "completion": 4096, "cached": 8}
    assert (info["wait_reason"], info["wait_until"]) == ("circuit open", NOW)
    idle = ThreadOut.of(Thread(id="t0123456789ab/t2", agent="a"), scope).model_dump()
    assert (idle["wait_reason"], idle["wait_until"]) == (None, None)


def status(**values: object) -> StoreStatus:
    base: dict[str, object] = {
        "threads_by_status": {},
        "threads_ready": 0,
        "threads_leased": 0,
        "backlog_by_priority": {},
        "outbox_by_status": {},
        "dead_letters": 0,
        "messages": 0,
    }
    return StoreStatus(**{**base, **values})  # type: ignore[arg-type]


def test_status_shows_model_tokens_and_threads_waiting_on_a_model() -> None:
    s = status(
        usage={"prompt": 1234, "completion": 56, "cached": 1000},
        threads_waiting=3,
        waiting_until=NOW,
        waiting_by_reason={"ModelError: circuit open": 3},
    )
    rows = dict(model_rows(s))
    assert rows["model tokens"] == "prompt 1,234 (cached 1,000), completion 56"
    assert "3 until" in str(rows["waiting on model"]) and "circuit open" in str(rows["waiting on model"])
    assert "waiting on model" not in dict(model_rows(status()))
    wire = StatusOut.of(s).model_dump()
    assert (wire["usage"], wire["threads_waiting"], wire["waiting_until"]) == (s.usage, 3, NOW)


def render(text: object) -> str:
    console = Console(width=200, record=True)
    console.print(text)
    return console.export_text()


def test_dormant_show_marks_a_cut_reply_and_shows_reasoning_and_tokens() -> None:
    message = Message(
        seq=2,
        role="assistant",
        content="The answer",
        finish_reason="length",
        reasoning="thinking hard",
        usage=Usage(prompt=10, completion=20, cached=5),
    )
    shown = render(message_text(message, max_chars=1000, show_time=False))
    assert "[cut by the output cap]" in shown
    assert "~ thinking hard" in shown and "tokens 10 in (5 cached) / 20 out" in shown
    plain = render(
        message_text(Message(seq=2, role="assistant", content="ok", finish_reason="stop"), max_chars=99)
    )
    assert "cut" not in plain and "tokens" not in plain
    line = render(
        thread_line(
            Thread(id="t", agent="a", usage_prompt=7, usage_completion=3, wait_reason="down", wait_until=NOW)
        )
    )
    assert "tokens 7 in (0 cached) / 3 out" in line and "waiting until" in line and "down" in line
