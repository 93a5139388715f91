"""The pure slice logic (:class:`dormant.slices.step.Turn`): no database, no model.

The tests play the runtime's part by hand: they feed model replies and inline
results into a Turn and inspect the frozen plan it produces.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dormant.models.base import ModelReply
from dormant.records import CommitPlan, Input, InputKind, Message, Priority, SliceLoad, Thread, ToolCall
from dormant.slices.step import InlineResult, Turn, input_message
from dormant.tools.spec import ToolBox, make_tool
from tests.helpers import check_history

NOW = 1_700_000_000.0


def add(a: int, b: int) -> int:
    """Add two integers (inline)."""
    return a + b


def fetch(url: str) -> str:
    """Fetch a URL (async, idempotent)."""
    return url


def charge(amount: int) -> str:
    """Charge money (async, not idempotent)."""
    return str(amount)


TOOLS = ToolBox(
    [
        make_tool(add),
        make_tool(fetch, mode="async", idempotent=True),
        make_tool(charge, mode="async"),
    ]
)


def thread(*, last_seq: int = 0, awaiting: int = 0) -> Thread:
    return Thread(id="t1", agent="a", last_seq=last_seq, awaiting=awaiting)


def inp(
    input_id: int,
    kind: InputKind = "user",
    content: str = "hello",
    *,
    call_id: str | None = None,
    tool_name: str | None = None,
    source: str | None = None,
) -> Input:
    return Input(
        id=input_id,
        thread_id="t1",
        kind=kind,
        dedup_key=f"k{input_id}",
        content=content,
        priority=Priority.P1,
        not_before=0.0,
        admitted_at=NOW,
        call_id=call_id,
        tool_name=tool_name,
        source=source,
    )


def make_turn(
    inputs: Sequence[Input],
    *,
    last_seq: int = 0,
    awaiting: int = 0,
    view: tuple[Message, ...] = (),
    max_rounds: int = 8,
) -> Turn:
    load = SliceLoad(thread=thread(last_seq=last_seq, awaiting=awaiting), view=view, inputs=tuple(inputs))
    return Turn(load, token="tok", system="sys", tools=TOOLS, max_rounds=max_rounds, now=NOW)


def call(call_id: str, name: str, args: object) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))


def reply(text: str = "", *calls: ToolCall) -> ModelReply:
    return ModelReply(text=text, tool_calls=calls)


def drive(turn: Turn, replies: Iterable[ModelReply]) -> tuple[CommitPlan, int]:
    """Run the turn as the runtime does; inline tools answer ``result:<id>``. Returns (plan, model calls)."""
    source = iter(replies)
    calls = 0
    while turn.wants_model:
        calls += 1
        inline = turn.on_reply(next(source))
        if inline:
            turn.on_results(
                [InlineResult(call=c.call, content=f"result:{model_id(c.call.id)}") for c in inline]
            )
    return turn.plan(), calls


def model_id(stored: str) -> str:
    """The id the model gave a call, from the id the slice stores it under (``<id>.<seq>.<i>``)."""
    return stored.rsplit(".", 2)[0]


def tool_results(plan: CommitPlan) -> dict[str, str]:
    """Tool results of a plan by the model's call id."""
    out: dict[str, str] = {}
    for m in plan.messages:
        if m.role == "tool":
            assert m.tool_call_id is not None
            key = model_id(m.tool_call_id)
            assert key not in out, f"two results for {m.tool_call_id}"
            out[key] = m.content
    return out


# -- inputs → messages ------------------------------------------------------------------


def test_inputs_become_messages_in_order_after_last_seq() -> None:
    inputs = [
        inp(7, "user", "first"),
        inp(8, "timer", "alarm"),
        inp(9, "event", "ping"),
        inp(10, "report", "child done", source="t1/c9"),
    ]
    turn = make_turn(inputs, last_seq=4)
    assert turn.wants_model
    plan = turn.plan()
    assert [m.seq for m in plan.messages] == [5, 6, 7, 8]
    assert [m.input_id for m in plan.messages] == [7, 8, 9, 10]
    assert [m.role for m in plan.messages] == ["user"] * 4
    assert [m.content for m in plan.messages] == [
        "first",
        "[timer] alarm",
        "[event] ping",
        "[report from thread t1/c9] child done",
    ]
    assert [m.source for m in plan.messages] == ["user", "timer", "event", "report"]
    assert plan.consumed == (7, 8, 9, 10)
    assert plan.token == "tok" and plan.thread_id == "t1"


def test_tool_result_input_becomes_tool_message() -> None:
    message = input_message(inp(3, "tool_result", "42", call_id="c1", tool_name="fetch"), 9, NOW)
    assert message.role == "tool"
    assert (message.seq, message.tool_call_id, message.name, message.input_id) == (9, "c1", "fetch", 3)
    assert message.content == "42"


def test_no_inputs_means_no_model_call_and_an_empty_plan() -> None:
    turn = make_turn([], last_seq=3)
    assert not turn.wants_model
    plan = turn.plan()
    assert plan.messages == () and plan.consumed == () and plan.calls == ()


def test_request_holds_view_then_new_messages_and_tool_schemas() -> None:
    old = Message(seq=1, role="user", content="old")
    turn = make_turn([inp(2, "user", "new")], last_seq=1, view=(old,))
    request = turn.request()
    assert request.system == "sys" and request.thread_id == "t1"
    assert [m.content for m in request.messages] == ["old", "new"]
    assert {t["function"]["name"] for t in request.tools} == {"add", "fetch", "charge"}


# -- awaiting async results ---------------------------------------------------------------


def test_tool_result_decrements_awaiting_and_model_waits_while_calls_are_open() -> None:
    turn = make_turn([inp(5, "tool_result", "r1", call_id="c1")], last_seq=3, awaiting=2)
    assert not turn.wants_model
    plan = turn.plan()
    assert plan.awaiting == 1
    assert [m.role for m in plan.messages] == ["tool"]
    assert plan.consumed == (5,)


def test_last_result_in_reopens_the_model() -> None:
    inputs = [inp(5, "tool_result", "r1", call_id="c1"), inp(6, "tool_result", "r2", call_id="c2")]
    turn = make_turn(inputs, last_seq=3, awaiting=2)
    assert turn.wants_model
    plan, calls = drive(turn, [reply("both in")])
    assert calls == 1
    assert plan.awaiting == 0
    assert [m.role for m in plan.messages] == ["tool", "tool", "assistant"]


def test_awaiting_never_goes_negative() -> None:
    turn = make_turn([inp(5, "tool_result", "late", call_id="cx")], awaiting=0)
    assert turn.plan().awaiting == 0


# -- replies --------------------------------------------------------------------------------


def test_plain_reply_ends_the_turn() -> None:
    plan, calls = drive(make_turn([inp(1)]), [reply("hi there")])
    assert calls == 1
    assert [(m.role, m.content) for m in plan.messages] == [("user", "hello"), ("assistant", "hi there")]
    assert plan.calls == () and plan.awaiting == 0


@pytest.mark.parametrize(
    ("bad", "needle"),
    [
        (call("c1", "nope", {}), "unknown tool 'nope'"),
        (call("c1", "add", "{not json"), "JSON"),
        (call("c1", "add", "[1, 2]"), "object"),
        (call("c1", "add", {"a": "x", "b": 2}), "invalid arguments"),
        (call("c1", "add", {"a": 1}), "invalid arguments"),
        (call("c1", "fetch", {"url": 5}), "invalid arguments"),
    ],
)
def test_unknown_tool_or_bad_arguments_get_an_error_result_and_another_round(
    bad: ToolCall, needle: str
) -> None:
    turn = make_turn([inp(1)])
    plan, calls = drive(turn, [reply("", bad), reply("sorry")])
    assert calls == 2, "the model must see the error and answer again"
    results = tool_results(plan)
    assert list(results) == ["c1"]
    assert results["c1"].startswith("error:") and needle in results["c1"]
    assert plan.calls == (), "a refused call never reaches the outbox"
    assert [m.role for m in plan.messages] == ["user", "assistant", "tool", "assistant"]
    check_history(plan.messages)


def test_inline_calls_are_answered_in_call_order_then_another_round() -> None:
    turn = make_turn([inp(1)])
    assert turn.wants_model
    inline = turn.on_reply(
        reply("adding", call("c1", "add", {"a": 1, "b": 2}), call("c2", "add", '{"a":3,"b":4}'))
    )
    assert [model_id(c.call.id) for c in inline] == ["c1", "c2"]
    assert [c.args for c in inline] == [{"a": 1, "b": 2}, {"a": 3, "b": 4}]
    assert all(c.message_seq == 2 for c in inline), "the seq of the assistant message that made the calls"
    assert not turn.wants_model, "no round before the inline results are in"
    # results handed back out of order are still recorded in call order
    turn.on_results(
        [InlineResult(call=inline[1].call, content="7"), InlineResult(call=inline[0].call, content="3")]
    )
    assert turn.wants_model
    turn.on_reply(reply("3 and 7"))
    assert not turn.wants_model
    plan = turn.plan()
    assert [(m.role, m.tool_call_id and model_id(m.tool_call_id), m.content) for m in plan.messages] == [
        ("user", None, "hello"),
        ("assistant", None, "adding"),
        ("tool", "c1", "3"),
        ("tool", "c2", "7"),
        ("assistant", None, "3 and 7"),
    ]
    assert [m.seq for m in plan.messages] == [1, 2, 3, 4, 5]
    assert all(m.source == "inline" for m in plan.messages if m.role == "tool")
    assert turn.rounds == 2


def test_async_calls_go_to_the_outbox_and_end_the_slice() -> None:
    turn = make_turn([inp(1)], awaiting=0)
    inline = turn.on_reply(
        reply("on it", call("c1", "fetch", {"url": "u"}), call("c2", "charge", {"amount": 5}))
    )
    assert inline == []
    assert not turn.wants_model
    plan = turn.plan()
    assert [(model_id(c.call_id), c.tool, c.idempotent) for c in plan.calls] == [
        ("c1", "fetch", True),
        ("c2", "charge", False),
    ]
    assert json.loads(plan.calls[0].arguments) == {"url": "u"}
    assert plan.awaiting == 2
    assert tool_results(plan) == {}, "async results arrive later, through the inbox"


def test_mixed_inline_async_and_bad_calls_in_one_reply() -> None:
    turn = make_turn([inp(1)])
    replies = [
        reply(
            "",
            call("c1", "add", {"a": 1, "b": 1}),
            call("c2", "fetch", {"url": "u"}),
            call("c3", "missing", {}),
        ),
        reply("must not be asked"),
    ]
    plan, calls = drive(turn, replies)
    assert calls == 1, "an open async call blocks further rounds"
    results = tool_results(plan)
    assert results["c1"] == "result:c1"
    assert results["c3"].startswith("error:")
    assert "c2" not in results
    assert [model_id(c.call_id) for c in plan.calls] == ["c2"]
    assert plan.awaiting == 1


def test_inline_rounds_are_bounded_by_max_rounds() -> None:
    turn = make_turn([inp(1)], max_rounds=3)
    forever = (reply("again", call(f"c{i}", "add", {"a": i, "b": i})) for i in range(100))
    plan, calls = drive(turn, forever)
    assert calls == 3
    assert turn.rounds == 3
    assert len(tool_results(plan)) == 3, "the last round's calls are still answered"
    check_history(plan.messages)


def test_max_rounds_also_bounds_error_loops() -> None:
    turn = make_turn([inp(1)], max_rounds=2)
    plan, calls = drive(turn, (reply("", call(f"c{i}", "nope", {})) for i in range(100)))
    assert calls == 2
    assert len(tool_results(plan)) == 2


def test_inline_results_carry_effects_into_the_plan() -> None:
    from dormant.records import NewInput, NewThread

    turn = make_turn([inp(1)])
    (inline,) = turn.on_reply(reply("", call("c1", "add", {"a": 1, "b": 1})))
    child = NewThread(id="t1/c1", agent="a", parent_id="t1", parent_seq=1)
    item = NewInput(thread_id="t1/c1", kind="user", dedup_key="spawn:c1", content="task")
    turn.on_results([InlineResult(call=inline.call, content="ok", threads=(child,), admissions=(item,))])
    turn.on_reply(reply("done"))
    plan = turn.plan()
    assert plan.threads == (child,)
    assert plan.admissions == (item,)


# -- the pairing rule, over arbitrary model behaviour --------------------------------------

_call_kinds = st.sampled_from(["inline", "async_idem", "async", "unknown", "bad_json", "bad_args"])


def _make_call(kind: str, ident: str) -> ToolCall:
    if kind == "inline":
        return call(ident, "add", {"a": 1, "b": 2})
    if kind == "async_idem":
        return call(ident, "fetch", {"url": "u"})
    if kind == "async":
        return call(ident, "charge", {"amount": 1})
    if kind == "unknown":
        return call(ident, "ghost", {})
    if kind == "bad_json":
        return call(ident, "add", "{")
    return call(ident, "add", {"a": "NaN?"})


@given(
    rounds=st.lists(st.lists(_call_kinds, max_size=4), min_size=1, max_size=12),
    max_rounds=st.integers(min_value=1, max_value=6),
    awaiting=st.integers(min_value=0, max_value=2),
    results_in=st.integers(min_value=0, max_value=2),
)
def test_every_tool_call_gets_exactly_one_result_or_is_awaited(
    rounds: list[list[str]], max_rounds: int, awaiting: int, results_in: int
) -> None:
    inputs = [inp(i + 1, "tool_result", "r", call_id=f"old{i}") for i in range(min(results_in, awaiting))]
    if awaiting == 0:
        inputs.append(inp(10, "user", "go"))
    turn = make_turn(inputs, last_seq=5, awaiting=awaiting, max_rounds=max_rounds)
    counter = iter(range(1000))
    replies = [
        reply(f"r{n}", *(_make_call(k, f"c{next(counter)}") for k in kinds)) for n, kinds in enumerate(rounds)
    ]
    replies.append(reply("final"))
    expected_awaiting = max(0, awaiting - len([i for i in inputs if i.kind == "tool_result"]))
    plan, model_calls = drive(turn, replies)

    assert model_calls <= max_rounds
    if expected_awaiting:
        assert model_calls == 0, "the model is never called while calls are open"
    assert [m.seq for m in plan.messages] == list(range(6, 6 + len(plan.messages)))
    assert plan.consumed == tuple(i.id for i in inputs)
    results = tool_results(plan)
    async_ids = [c.call_id for c in plan.calls]
    assert len(async_ids) == len(set(async_ids))
    made = [c for m in plan.messages if m.role == "assistant" for c in m.tool_calls]
    for c in made:
        in_outbox = c.id in async_ids
        answered = model_id(c.id) in results
        assert in_outbox != answered, f"call {c.id} must be answered exactly once (now or via the outbox)"
    assert plan.awaiting == expected_awaiting + len(async_ids)
    if async_ids:
        # an async call ends the slice: it is in the last assistant message
        last_assistant = [m for m in plan.messages if m.role == "assistant"][-1]
        assert set(async_ids) <= {c.id for c in last_assistant.tool_calls}
        assert plan.messages[-1].role in ("assistant", "tool")


def test_call_ids_are_made_unique_per_thread() -> None:
    """A model that reuses ids (``call_0`` in every reply) still gets distinct stored ids."""
    turn = make_turn([inp(1, "user", "go")], last_seq=5, max_rounds=3)
    replies = [
        reply("", call("call_0", "add", {"a": 1, "b": 2})),
        reply("", call("call_0", "add", {"a": 1, "b": 2})),
    ]
    replies.append(reply("done"))
    plan, _ = drive(turn, replies)
    made = [c.id for m in plan.messages if m.role == "assistant" for c in m.tool_calls]
    assert len(made) == 2 and len(set(made)) == 2
    assert all(model_id(i) == "call_0" for i in made)
    answered = [m.tool_call_id for m in plan.messages if m.role == "tool"]
    assert answered == made


CLIENT_TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}


def test_client_tools_are_shown_and_a_call_to_one_is_an_external_wait() -> None:
    load = SliceLoad(thread=thread(), view=(), inputs=(inp(1, content="weather?"),))
    turn = Turn(load, token="tok", system="sys", tools=TOOLS, max_rounds=8, now=NOW, external=[CLIENT_TOOL])
    names = [t["function"]["name"] for t in turn.request().tools]
    assert names == ["add", "fetch", "charge", "get_weather"]
    inline = turn.on_reply(
        reply("", call("c1", "get_weather", {"city": "Paris"}), call("c2", "fetch", {"url": "u"}))
    )
    assert inline == [] and not turn.wants_model
    plan = turn.plan()
    assert [(c.tool, c.external) for c in plan.calls] == [("get_weather", True), ("fetch", False)]
    assert plan.awaiting == 2 and tool_results(plan) == {}, "no error result for a client tool"


def test_without_the_declaration_a_client_tool_is_an_unknown_tool() -> None:
    turn = make_turn([inp(1)])
    turn.on_reply(reply("", call("c1", "get_weather", {})))
    plan = turn.plan()
    assert plan.calls == () and plan.awaiting == 0
    assert "unknown tool" in next(iter(tool_results(plan).values()))


def test_a_user_message_is_dated_when_it_was_sent() -> None:
    from dormant.records import Input, Priority
    from dormant.slices.step import input_message

    sent = Input(
        id=1,
        thread_id="t",
        kind="user",
        dedup_key="k",
        content="hi",
        priority=Priority(1),
        not_before=0.0,
        admitted_at=100.0,
    )
    assert input_message(sent, 1, now=160.0).created_at == 100.0
    tool = Input(
        id=2,
        thread_id="t",
        kind="tool_result",
        dedup_key="c",
        content="out",
        priority=Priority(1),
        not_before=0.0,
        admitted_at=100.0,
        call_id="c",
        tool_name="x",
    )
    assert input_message(tool, 2, now=160.0).created_at == 160.0
    assert input_message(sent, 1, now=50.0).created_at == 50.0, "a clock behind the sender's: now"
