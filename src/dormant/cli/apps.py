"""Where the CLI gets its agent definitions.

``--app module:attr`` names a Python object: a list (or tuple) of
:class:`~dormant.agent.Agent`, or a zero-argument callable returning one.
Without it, the CLI hosts one built-in agent, ``assistant``, whose model is
chosen by name: ``scripted`` is the in-process echo model, anything else is a
model served by an OpenAI-compatible endpoint at ``base_url``.

An ``mcp.json`` file beside the ``--app`` module's file (``{"mcpServers": {...}}``, the
format desktop hosts read; see :func:`dormant.tools.mcp.servers_from_json`) gives every
agent of the app those MCP servers, after the ones it names in code.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ..agent import Agent
from ..errors import UsageError
from ..models import ScriptedModel, echo_model, echo_script
from ..models.base import Model
from ..tokens import DEFAULT_ENCODING, tokenizer_encoding
from ..tools.mcp import McpServer, load_mcp_json

#: The file beside an ``--app`` module that names MCP servers for its agents.
MCP_FILE = "mcp.json"

#: Name of the built-in agent used when no ``--app`` is given.
DEFAULT_AGENT = "assistant"
#: ``--model`` value that selects the in-process echo model.
SCRIPTED = "scripted"
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def builtin_model(
    name: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    tokenizer: str | None = None,
) -> Model:
    """The model called ``name``: ``scripted`` (echo) or an OpenAI-compatible model.

    The OpenAI adapter reads its API key from ``DORMANT_API_KEY`` or ``OPENAI_API_KEY``;
    ``context_window`` and ``max_output_tokens`` are its declared budget (defaults:
    the adapter's), ``tokenizer`` how it counts (:func:`dormant.tokens.tokenizer_encoding`;
    the scripted model takes an encoding or a tokenizer.json, not ``server``). Raises
    :class:`UsageError` for an empty name, a bad base URL, an impossible budget or an
    unknown tokenizer.
    """
    name = name.strip()
    if not name:
        raise UsageError("--model must name a model (or 'scripted' for the echo model)")
    window = 128_000 if context_window is None else context_window
    if name == SCRIPTED:
        own = tokenizer_encoding(tokenizer or "auto")
        if context_window is None and max_output_tokens is None and own is None:
            return echo_model()
        return ScriptedModel(
            echo_script,
            name="scripted-echo",
            context_window=window,
            max_output_tokens=max_output_tokens,
            encoding=own or DEFAULT_ENCODING,
        )
    if not base_url.startswith(("http://", "https://")):
        raise UsageError(f"--base-url must be an http(s) URL, not {base_url!r}")
    from ..models.openai import OpenAIChatModel

    return OpenAIChatModel(
        model=name,
        base_url=base_url,
        context_window=window,
        max_output_tokens=max_output_tokens,
        tokenizer=tokenizer,
    )


def builtin_agents(
    model: str,
    *,
    base_url: str = DEFAULT_BASE_URL,
    system: str | None = None,
    builtins: bool = True,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    tokenizer: str | None = None,
) -> list[Agent]:
    """The one built-in agent, ``assistant``, running ``model`` (with the built-in
    tools unless ``builtins`` is false)."""
    chosen = builtin_model(
        model,
        base_url=base_url,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        tokenizer=tokenizer,
    )
    if system is None:
        return [Agent(name=DEFAULT_AGENT, model=chosen, builtins=builtins)]
    return [Agent(name=DEFAULT_AGENT, model=chosen, system_prompt=system, builtins=builtins)]


def load_app(spec: str) -> list[Agent]:
    """The agents named by ``spec`` (``package.module:attr``, ``attr`` may be dotted).

    The current directory is importable, as with ``python -m``. Raises
    :class:`UsageError` with a message naming what is wrong: malformed spec,
    missing module or attribute, an import that failed, or an object that is not
    a non-empty list of agents (nor a callable returning one).
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise UsageError(f"--app {spec!r} must look like 'package.module:attr'")
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise UsageError(f"--app {spec!r}: no module named {exc.name!r}") from None
        raise UsageError(f"--app {spec!r}: importing {module_name!r} failed: {exc}") from exc
    except Exception as exc:  # the user's module is broken: say so, in one line
        raise UsageError(
            f"--app {spec!r}: importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    obj: object = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"--app {spec!r}: {module_name!r} has no attribute {attr!r}") from None
    if callable(obj) and not isinstance(obj, Sequence):
        try:
            obj = obj()
        except Exception as exc:
            raise UsageError(f"--app {spec!r}: calling {attr}() failed: {type(exc).__name__}: {exc}") from exc
    agents = _agents(spec, obj)
    servers = app_mcp_servers(module)
    return [with_servers(agent, servers) for agent in agents] if servers else agents


def app_mcp_servers(module: object) -> list[McpServer]:
    """The servers of the ``mcp.json`` beside ``module``'s file (none when there is no
    such file). Raises :class:`UsageError` for a file that is not valid."""
    origin = getattr(module, "__file__", None)
    if not origin:
        return []
    path = Path(origin).resolve().parent / MCP_FILE
    return load_mcp_json(path) if path.is_file() else []


def with_servers(agent: Agent, servers: Sequence[McpServer]) -> Agent:
    """``agent`` with ``servers`` added after its own (one it names already is kept)."""
    own = {s.name for s in agent.mcp}
    extra = [s for s in servers if s.name not in own]
    return dataclasses.replace(agent, mcp=(*agent.mcp, *extra)) if extra else agent


def _agents(spec: str, obj: object) -> list[Agent]:
    if isinstance(obj, str | bytes) or not isinstance(obj, Sequence):
        raise UsageError(
            f"--app {spec!r} must name a list of Agent or a zero-argument callable returning one, "
            f"not {type(obj).__name__}"
        )
    agents: list[Agent] = []
    for index, item in enumerate(obj):
        if not isinstance(item, Agent):
            raise UsageError(f"--app {spec!r}: item {index} is a {type(item).__name__}, not an Agent")
        agents.append(item)
    if not agents:
        raise UsageError(f"--app {spec!r}: the list of agents is empty")
    return agents


def load_agents(
    app: str | None,
    *,
    model: str = SCRIPTED,
    base_url: str = DEFAULT_BASE_URL,
    system: str | None = None,
    builtins: bool = True,
    context_window: int | None = None,
    max_output_tokens: int | None = None,
    tokenizer: str | None = None,
) -> list[Agent]:
    """The CLI's agents: from ``app`` when given, else the built-in ``assistant``.

    The other arguments configure the built-in agent only.
    """
    if app:
        return load_app(app)
    return builtin_agents(
        model,
        base_url=base_url,
        system=system,
        builtins=builtins,
        context_window=context_window,
        max_output_tokens=max_output_tokens,
        tokenizer=tokenizer,
    )
