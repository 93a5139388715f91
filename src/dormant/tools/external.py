"""Client tools: tools a client declares in its request and runs itself (external tools).

A client of the OpenAI-compatible endpoints may send ``tools``: function schemas of
tools it runs on its side. They are checked here (:func:`declare`), stored with the
admitted input as JSON (:attr:`~dormant.records.NewInput.tools`, then the thread's
:attr:`~dormant.records.Thread.client_tools`) and shown to the model beside the
agent's own tools (:func:`decode`). A call the model makes to one is committed as an
``external`` outbox entry: the thread waits for it with nothing in RAM, no dispatcher
ever claims it, and the client's answer (a ``tool`` message, a
``function_call_output`` item, ``POST /v1/threads/{id}/tool_results/{call_id}``)
ends it.

The bounds: at most :data:`MAX_CLIENT_TOOLS` tools, names of 1-64 characters of
``A-Z a-z 0-9 _ -`` (OpenAI's rule), unique and not the name of one of the agent's own
tools, ``parameters`` a JSON schema of an object, and the whole declaration at most
:data:`~dormant.records.MAX_CLIENT_TOOLS_BYTES` of JSON. Anything else is a
:class:`~dormant.errors.UsageError` (400) naming the field; nothing is written.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

import msgspec

from ..errors import UsageError
from ..records import MAX_CLIENT_TOOLS_BYTES, ViewLimits
from ..tokens import count_text

#: Most tools one request may declare (OpenAI's own limit).
MAX_CLIENT_TOOLS = 128
#: Longest description of one client tool, in characters.
MAX_DESCRIPTION = 4096
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: JSON schema keywords whose value must be an object, an array or a string where used.
_OBJECTS = ("properties", "$defs", "definitions")

Schema = dict[str, Any]


def from_chat(tools: Sequence[Any]) -> list[Schema]:
    """Chat Completions ``tools`` (``{"type": "function", "function": {...}}``) as
    function schemas; UsageError (400) for a tool that is not a function, naming it."""
    out = []
    for index, item in enumerate(tools):
        where = f"tools.{index}"
        if not isinstance(item, dict) or item.get("type", "function") != "function":
            raise UsageError(
                f"{where}: only tools of type 'function' can be declared (this server runs no others)"
            )
        function = item.get("function")
        if not isinstance(function, dict):
            raise UsageError(f"{where}.function: a function tool needs a 'function' object")
        out.append(_schema(function, f"{where}.function"))
    return out


def from_responses(tools: Sequence[Any]) -> list[Schema]:
    """Responses ``tools`` (``{"type": "function", "name": ..., "parameters": ...}``) as
    function schemas; UsageError (400) for a built-in tool (web search, file search, ...),
    which this server cannot run."""
    out = []
    for index, item in enumerate(tools):
        where = f"tools.{index}"
        kind = item.get("type") if isinstance(item, dict) else None
        if kind != "function":
            shown = repr(kind) if isinstance(kind, str) else "without a type"
            raise UsageError(
                f"{where}: a tool of type {shown} cannot be declared: this server takes function "
                "tools that the client runs itself"
            )
        out.append(_schema(item, where))
    return out


def _schema(function: dict[str, Any], where: str) -> Schema:
    name = function.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise UsageError(f"{where}.name: a tool's name is 1-64 characters of A-Z a-z 0-9 _ -")
    description = function.get("description", "")
    if description is None:
        description = ""
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise UsageError(f"{where}.description: a string of at most {MAX_DESCRIPTION} characters")
    parameters = function.get("parameters")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    check_parameters(parameters, f"{where}.parameters")
    body: Schema = {"name": name, "description": description, "parameters": parameters}
    strict = function.get("strict")
    if strict is not None:
        if not isinstance(strict, bool):
            raise UsageError(f"{where}.strict: true or false")
        body["strict"] = strict
    return {"type": "function", "function": body}


def check_parameters(parameters: Any, where: str) -> None:
    """UsageError (400) unless ``parameters`` is a JSON schema of an object: a JSON object
    whose ``type`` (when given) is ``"object"``, whose ``properties`` is an object of
    schemas and whose ``required`` is a list of names."""
    if not isinstance(parameters, dict):
        raise UsageError(f"{where}: a JSON schema (an object)")
    kind = parameters.get("type", "object")
    if kind != "object":
        raise UsageError(f"{where}.type: the parameters of a tool are a JSON object ('object'), not {kind!r}")
    for key in _OBJECTS:
        value = parameters.get(key)
        if value is not None and not (
            isinstance(value, dict) and all(isinstance(v, dict | bool) for v in value.values())
        ):
            raise UsageError(f"{where}.{key}: an object of JSON schemas")
    required = parameters.get("required")
    if required is not None and not (
        isinstance(required, list) and all(isinstance(r, str) for r in required)
    ):
        raise UsageError(f"{where}.required: a list of property names")


def declare(schemas: Sequence[Schema], own: Collection[str], agent: str) -> str:
    """The declaration of ``schemas`` (from :func:`from_chat` or :func:`from_responses`) as
    stored: JSON text (``"[]"`` for none). UsageError (400) for more than
    :data:`MAX_CLIENT_TOOLS` tools, a name declared twice, a name of one of ``own`` (the
    tools of agent ``agent``, which it runs itself), or more than
    :data:`~dormant.records.MAX_CLIENT_TOOLS_BYTES` of JSON."""
    if len(schemas) > MAX_CLIENT_TOOLS:
        raise UsageError(f"tools: at most {MAX_CLIENT_TOOLS} tools per request, not {len(schemas)}")
    seen: set[str] = set()
    for index, schema in enumerate(schemas):
        name = schema["function"]["name"]
        if name in seen:
            raise UsageError(f"tools.{index}: two tools are named {name!r}")
        if name in own:
            raise UsageError(
                f"tools.{index}: the tool name {name!r} is one of agent {agent!r}'s own tools; "
                "a client tool needs a name of its own"
            )
        seen.add(name)
    text = json.dumps(list(schemas), separators=(",", ":"), ensure_ascii=False)
    size = len(text.encode())
    if size > MAX_CLIENT_TOOLS_BYTES:
        raise UsageError(f"tools: {size} bytes of schemas, over the limit of {MAX_CLIENT_TOOLS_BYTES}")
    return text


def decode(text: str | None) -> tuple[Schema, ...]:
    """The stored declaration ``text`` (a thread's ``client_tools``) as schemas; () for
    None or for text that is not a list of function schemas (never raises: what was
    stored was checked by :func:`declare`)."""
    if not text:
        return ()
    try:
        raw = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(raw, list):
        return ()
    return tuple(
        item
        for item in raw
        if isinstance(item, dict)
        and isinstance(item.get("function"), dict)
        and isinstance(item["function"].get("name"), str)
    )


def names(schemas: Sequence[Schema]) -> frozenset[str]:
    """The names of ``schemas``."""
    return frozenset(schema["function"]["name"] for schema in schemas)


def schema_tokens(schemas: Sequence[Schema], encoding: str) -> int:
    """Tokens ``schemas`` cost in a prompt, counted as the prompt budget counts the agent's
    own (their JSON, :func:`dormant.view.budget.schemas_text`)."""
    return count_text(json.dumps(list(schemas)), encoding) if schemas else 0


def within(limits: ViewLimits, schemas: Sequence[Schema]) -> ViewLimits:
    """``limits`` with room for ``schemas`` taken from the history's token budget, like the
    agent's own schemas (a request whose tools take over half of it was refused by
    :func:`check_budget`; the history keeps at least a quarter of it whatever was stored)."""
    if not schemas:
        return limits
    cost = schema_tokens(schemas, limits.encoding)
    return msgspec.structs.replace(limits, max_tokens=max(limits.max_tokens - cost, limits.max_tokens // 4))


def check_budget(limits: ViewLimits, schemas: Sequence[Schema], agent: str) -> None:
    """UsageError (400) when ``schemas`` would take over half of agent ``agent``'s history
    budget (``limits.max_tokens``): its model could not see enough of the conversation."""
    cost = schema_tokens(schemas, limits.encoding)
    if cost * 2 > limits.max_tokens:
        raise UsageError(
            f"tools: the schemas take {cost} tokens, over half of the {limits.max_tokens} tokens of "
            f"agent {agent!r}'s prompt budget for history; declare fewer or shorter tools"
        )
