"""``@tool``: schemas from signatures, argument parsing, invocation; the built-in tools."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from dormant.errors import UsageError
from dormant.records import NewInput, NewThread
from dormant.tools.builtins import BUILTIN_TOOLS, report_to_parent, sleep_until, spawn_thread
from dormant.tools.spec import ToolBox, ToolContext, ToolSpec, make_tool, result_text, tool


def ctx(**overrides: Any) -> ToolContext:
    values: dict[str, Any] = {
        "thread_id": "t1",
        "call_id": "c1",
        "agent": "a",
        "message_seq": 4,
        "now": 1000.0,
    }
    values.update(overrides)
    return ToolContext(**values)


@tool
def search(query: str, limit: int = 5, exact: bool = False) -> list[str]:
    """Search the catalogue."""
    return [query] * limit


@tool(name="fetch_url", mode="async", idempotent=True, timeout=3.0, description="Fetch it.")
async def fetch(url: str, context: ToolContext) -> dict[str, str]:
    return {"url": url, "call": context.call_id}


class Point(pydantic.BaseModel):
    x: int
    y: int


@tool
def where() -> Point:
    """Where am I."""
    return Point(x=1, y=2)


def test_schema_comes_from_the_signature() -> None:
    assert isinstance(search, ToolSpec)
    schema = search.schema()
    assert schema["type"] == "function"
    fn = schema["function"]
    assert fn["name"] == "search"
    assert fn["description"] == "Search the catalogue."
    params = fn["parameters"]
    assert params["type"] == "object"
    assert params["required"] == ["query"]
    assert params["properties"]["query"] == {"type": "string"}
    assert params["properties"]["limit"] == {"type": "integer", "default": 5}
    assert params["properties"]["exact"] == {"type": "boolean", "default": False}
    assert "title" not in params
    assert (search.mode, search.idempotent, search.timeout) == ("inline", False, 30.0)


def test_options_and_context_parameter_is_not_in_the_schema() -> None:
    assert isinstance(fetch, ToolSpec)
    assert fetch.name == "fetch_url"
    assert fetch.description == "Fetch it."
    assert (fetch.mode, fetch.idempotent, fetch.timeout) == ("async", True, 3.0)
    assert fetch.context_param == "context"
    assert set(fetch.parameters["properties"]) == {"url"}
    assert fetch.parameters["required"] == ["url"]


def test_parse_validates_and_applies_defaults() -> None:
    assert search.parse('{"query": "q"}') == {"query": "q", "limit": 5, "exact": False}
    assert search.parse('{"query": "q", "limit": "7"}')["limit"] == 7  # lax, like the model expects


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ("{oops", "JSON"),
        ("[1]", "object"),
        ('"text"', "object"),
        ("{}", "query: Field required"),
        ("", "query: Field required"),
        ('{"query": "q", "limit": "many"}', "limit:"),
    ],
)
def test_parse_errors_are_readable_value_errors(raw: str, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        search.parse(raw)


async def test_sync_tools_run_off_the_event_loop_and_results_become_json() -> None:
    seen: list[str] = []

    @tool
    def which_thread() -> str:
        """Name the OS thread."""
        seen.append(threading.current_thread().name)
        return "ok"

    assert await which_thread.invoke({}, ctx()) == "ok"
    assert seen and seen[0] != threading.main_thread().name
    assert await search.invoke({"query": "q", "limit": 2, "exact": False}, ctx()) == '["q","q"]'


async def test_async_tools_receive_their_context() -> None:
    out = await fetch.invoke({"url": "http://x"}, ctx(call_id="call-9"))
    assert out == '{"url":"http://x","call":"call-9"}'


async def test_pydantic_results_are_dumped_as_json() -> None:
    assert await where.invoke({}, ctx()) == '{"x":1,"y":2}'
    assert result_text("plain") == "plain"
    assert result_text(None) == "null"


def test_untyped_parameter_is_refused() -> None:
    def bad(x) -> str:  # type: ignore[no-untyped-def]
        return str(x)

    with pytest.raises(UsageError, match="needs a type"):
        make_tool(bad)


def test_bad_mode_and_timeout_are_refused() -> None:
    def ok(x: int) -> int:
        return x

    with pytest.raises(UsageError):
        make_tool(ok, mode="later")  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        make_tool(ok, timeout=0)


def test_toolbox_refuses_duplicate_names() -> None:
    with pytest.raises(UsageError, match="two tools"):
        ToolBox([search, search])
    box = ToolBox([search, fetch])
    assert box.get("fetch_url") is fetch and box.get("nope") is None and len(box) == 2
    assert [s["function"]["name"] for s in box.schemas] == ["search", "fetch_url"]


def test_context_effects_are_inline_only() -> None:
    c = ctx(inline=False)
    with pytest.raises(UsageError):
        c.spawn(NewThread(id="x", agent="a", parent_id="t1", parent_seq=0))
    with pytest.raises(UsageError):
        c.admit(NewInput(thread_id="t1", kind="user", dedup_key="k", content="x"))


# -- built-ins --------------------------------------------------------------------------


def test_builtins_are_inline_tools_with_schemas() -> None:
    names = {t.name for t in BUILTIN_TOOLS}
    assert names == {"spawn_thread", "report_to_parent", "sleep_until", "read_blob"}
    assert all(t.mode == "inline" and t.context_param == "ctx" for t in BUILTIN_TOOLS)


def test_spawn_thread_creates_a_child_seeing_history_before_the_call() -> None:
    c = ctx(agents=frozenset({"a", "b"}))
    text = spawn_thread("research X", c, agent="b")
    assert "t1/c1" in text
    assert c.threads == [NewThread(id="t1/c1", agent="b", parent_id="t1", parent_seq=3)]
    assert c.admissions == [
        NewInput(thread_id="t1/c1", kind="user", dedup_key="spawn:c1", content="research X")
    ]


def test_spawn_thread_defaults_to_own_agent_and_refuses_unknown_agents() -> None:
    c = ctx(agents=frozenset({"a"}))
    spawn_thread("x", c)
    assert c.threads[0].agent == "a"
    c2 = ctx(agents=frozenset({"a"}))
    assert spawn_thread("x", c2, agent="zzz").startswith("error: unknown agent")
    assert c2.threads == [] and c2.admissions == []


def test_report_to_parent() -> None:
    c = ctx(thread_id="p/c1", call_id="c7", parent_id="p")
    assert report_to_parent("found it", c) == "report sent to p"
    assert c.admissions == [
        NewInput(thread_id="p", kind="report", dedup_key="report:p/c1:c7", content="found it", source="p/c1")
    ]
    orphan = ctx()
    assert report_to_parent("x", orphan).startswith("error:")
    assert orphan.admissions == []


def test_sleep_until_seconds_and_iso_time() -> None:
    c = ctx(now=1000.0)
    assert sleep_until(c, seconds=30).startswith("will wake at")
    (timer,) = c.admissions
    assert (timer.thread_id, timer.kind, timer.dedup_key, timer.not_before) == (
        "t1",
        "timer",
        "timer:c1",
        1030.0,
    )

    c2 = ctx()
    sleep_until(c2, until="2030-01-02T03:04:05", note="standup")
    assert c2.admissions[0].not_before == datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC).timestamp()
    assert c2.admissions[0].content == "standup"


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"seconds": 1.0, "until": "2030-01-01T00:00:00"}, {"seconds": -1.0}, {"until": "next tuesday"}],
)
def test_sleep_until_refuses_bad_arguments(kwargs: dict[str, Any]) -> None:
    c = ctx()
    assert sleep_until(c, **kwargs).startswith("error:")
    assert c.admissions == []


async def test_builtins_parse_and_invoke_through_their_spec() -> None:
    spec = next(t for t in BUILTIN_TOOLS if t.name == "sleep_until")
    args = spec.parse('{"seconds": 5}')
    c = ctx(now=10.0)
    out = await spec.invoke(args, c)
    assert out.startswith("will wake at") and c.admissions[0].not_before == 15.0
