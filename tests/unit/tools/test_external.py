"""Client tool declarations: what is taken, what is refused, and how the budget counts them."""

from __future__ import annotations

import json

import pytest

from dormant.errors import UsageError
from dormant.records import MAX_CLIENT_TOOLS_BYTES, ViewLimits
from dormant.tools import external

WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def test_chat_and_responses_declarations_store_the_same_schema() -> None:
    chat = external.from_chat([{"type": "function", "function": WEATHER}])
    responses = external.from_responses([{"type": "function", **WEATHER, "strict": False}])
    assert chat[0]["function"]["name"] == responses[0]["function"]["name"] == "get_weather"
    assert responses[0]["function"]["strict"] is False
    text = external.declare(chat, own=("lookup",), agent="a")
    assert external.decode(text) == tuple(chat) and external.names(chat) == {"get_weather"}
    assert external.decode(None) == () and external.decode("not json") == ()


def test_parameters_default_to_an_empty_object() -> None:
    (schema,) = external.from_chat([{"type": "function", "function": {"name": "ping"}}])
    assert schema["function"]["parameters"] == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("tools", "match"),
    [
        ([{"type": "code_interpreter"}], "type 'function'"),
        ([{"type": "function"}], "needs a 'function'"),
        ([{"type": "function", "function": {"name": ""}}], "tools.0.function.name"),
        ([{"type": "function", "function": {"name": "a" * 65}}], "1-64"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}], "a JSON schema"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}], "'object'"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"properties": 3}}}], "properties"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"required": "x"}}}], "required"),
        ([{"type": "function", "function": {"name": "f", "description": 5}}], "description"),
        ([{"type": "function", "function": {"name": "f", "strict": "yes"}}], "strict"),
    ],
)
def test_bad_chat_declarations_are_refused_naming_the_field(tools: list[object], match: str) -> None:
    with pytest.raises(UsageError, match=match):
        external.from_chat(tools)


def test_builtin_responses_tools_are_refused() -> None:
    with pytest.raises(UsageError, match="'file_search'"):
        external.from_responses([{"type": "file_search"}])


def test_declare_bounds_count_bytes_duplicates_and_clashes() -> None:
    one = external.from_chat([{"type": "function", "function": WEATHER}])
    with pytest.raises(UsageError, match="own tools"):
        external.declare(one, own=("get_weather",), agent="a")
    with pytest.raises(UsageError, match="two tools"):
        external.declare(one + one, own=(), agent="a")
    many = external.from_chat([{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)])
    with pytest.raises(UsageError, match="at most 128"):
        external.declare(many, own=(), agent="a")
    big = external.from_chat(
        [{"type": "function", "function": {"name": f"f{i}", "description": "é" * 4000}} for i in range(9)]
    )
    assert len(json.dumps(big, ensure_ascii=False).encode()) > MAX_CLIENT_TOOLS_BYTES
    with pytest.raises(UsageError, match="bytes"):
        external.declare(big, own=(), agent="a")
    assert external.declare([], own=(), agent="a") == "[]"


def test_the_budget_makes_room_for_the_schemas() -> None:
    schemas = external.from_chat([{"type": "function", "function": WEATHER}])
    limits = ViewLimits(max_tokens=10_000)
    cost = external.schema_tokens(schemas, limits.encoding)
    assert cost > 10
    assert external.within(limits, schemas).max_tokens == 10_000 - cost
    assert external.within(limits, ()) is limits
    external.check_budget(limits, schemas, "a")
    with pytest.raises(UsageError, match="prompt budget"):
        external.check_budget(ViewLimits(max_tokens=cost), schemas, "a")
