"""MCP server configuration: :class:`McpServer`, and ``mcp.json`` in the hosts' format.

A server is reached over **stdio** (``command``, ``args``, ``env``, ``cwd``: dormant
starts the process) or **streamable HTTP** (``url``, ``headers``). ``env`` and
``headers`` often hold secrets: they are never part of a repr, a log record or an
error message (only their names are).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UsageError

#: What a server's name may look like (it prefixes its tools' names: ``git__status``).
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
#: Most tools kept of one server's listing.
DEFAULT_MAX_TOOLS = 128
#: Most bytes of one server's tool listing (names, descriptions, JSON schemas) kept.
DEFAULT_MAX_TOOLS_BYTES = 256 * 1024
#: Largest JSON-RPC message read from a stdio server; a longer line ends the connection.
DEFAULT_MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: Bytes of a stdio server's stderr kept (the newest; each line is logged as it comes).
DEFAULT_STDERR_BYTES = 16 * 1024

_KEYS = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "type",
    "transport",
    "timeout",
    "toolTimeouts",
    "maxCallSeconds",
    "startTimeout",
    "idempotent",
    "idempotentTools",
    "refreshSeconds",
    "maxTools",
    "maxToolsBytes",
    "maxMessageBytes",
    "disabled",
    "needsApproval",
    "approvalTools",
    "approvalSeconds",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class McpServer:
    """One MCP server an agent uses.

    Exactly one of ``command`` (stdio) and ``url`` (streamable HTTP) is set. ``timeout``
    is how long a call may go **without progress** (each progress notification restarts
    it); ``tool_timeouts`` overrides it per tool (the server's own tool name);
    ``max_call_s`` caps a call whatever its progress (the outbox lease outlives it).
    ``idempotent`` marks every tool of the server safe to run again after a crash,
    ``idempotent_tools`` some of them; otherwise a tool is idempotent only when the
    server annotates it ``idempotentHint``. A call to any other tool that was running
    when its worker died is answered "outcome unknown", never run again.

    ``needs_approval`` makes every call of the server's tools wait for a person's
    decision before it runs, ``approval_tools`` those of some of them (the server's own
    tool names); ``approval_s`` is such a wait's deadline (None: open until acted on). See
    ``docs/approvals.md``.

    The tool listing is refreshed every ``refresh_s`` and when the server says its list
    changed; at most ``max_tools`` tools and ``max_tools_bytes`` bytes of it are kept.
    Raises :class:`UsageError` for an impossible configuration.
    """

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = 60.0
    tool_timeouts: Mapping[str, float] = field(default_factory=dict)
    max_call_s: float = 600.0
    start_timeout: float = 30.0
    idempotent: bool = False
    idempotent_tools: frozenset[str] = frozenset()
    needs_approval: bool = False
    approval_tools: frozenset[str] = frozenset()
    approval_s: float | None = None
    refresh_s: float = 300.0
    max_tools: int = DEFAULT_MAX_TOOLS
    max_tools_bytes: int = DEFAULT_MAX_TOOLS_BYTES
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name) or "__" in self.name:
            raise UsageError(
                f"MCP server name {self.name!r} must be 1-32 letters, digits, '-' or '_' "
                "(no '__': it separates the server from the tool in a tool's name)"
            )
        if (self.command is None) == (self.url is None):
            raise UsageError(
                f"MCP server {self.name!r} needs exactly one of 'command' (stdio) and 'url' (HTTP)"
            )
        if self.command is not None and not self.command.strip():
            raise UsageError(f"MCP server {self.name!r}: 'command' is empty")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise UsageError(f"MCP server {self.name!r}: 'url' must be an http(s) URL")
        if self.url is None and self.headers:
            raise UsageError(f"MCP server {self.name!r}: 'headers' are for an HTTP server ('url')")
        if self.command is None and (self.env or self.args or self.cwd):
            raise UsageError(f"MCP server {self.name!r}: 'args', 'env' and 'cwd' are for a stdio server")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", dict(self.env))
        object.__setattr__(self, "headers", dict(self.headers))
        object.__setattr__(self, "tool_timeouts", dict(self.tool_timeouts))
        object.__setattr__(self, "idempotent_tools", frozenset(self.idempotent_tools))
        object.__setattr__(self, "approval_tools", frozenset(self.approval_tools))
        if self.approval_s is not None and not (math.isfinite(self.approval_s) and self.approval_s > 0):
            raise UsageError(f"MCP server {self.name!r}: approval_s must be a positive number of seconds")
        for key, value in (*self.env.items(), *self.headers.items()):
            if not isinstance(key, str) or not isinstance(value, str):
                raise UsageError(f"MCP server {self.name!r}: 'env' and 'headers' map names to strings")
        seconds = {
            "timeout": self.timeout,
            "max_call_s": self.max_call_s,
            "start_timeout": self.start_timeout,
            "refresh_s": self.refresh_s,
            **{f"tool_timeouts[{k!r}]": v for k, v in self.tool_timeouts.items()},
        }
        for what, secs in seconds.items():
            if not isinstance(secs, int | float) or not math.isfinite(secs) or secs <= 0:
                raise UsageError(f"MCP server {self.name!r}: {what} must be a positive number of seconds")
        if max([self.timeout, *self.tool_timeouts.values()]) > self.max_call_s:
            raise UsageError(f"MCP server {self.name!r}: a timeout is longer than max_call_s")
        for what, count in (
            ("max_tools", self.max_tools),
            ("max_tools_bytes", self.max_tools_bytes),
            ("max_message_bytes", self.max_message_bytes),
        ):
            if count < 1:
                raise UsageError(f"MCP server {self.name!r}: {what} must be at least 1")

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"

    def timeout_for(self, tool: str) -> float:
        """How long a call of ``tool`` may go without progress."""
        return self.tool_timeouts.get(tool, self.timeout)

    def is_idempotent(self, tool: str, hint: bool | None) -> bool:
        """Whether a call of ``tool`` may run again after a crash: configured so, or
        annotated ``idempotentHint`` by the server."""
        return self.idempotent or tool in self.idempotent_tools or bool(hint)

    def needs_approval_of(self, tool: str) -> bool:
        """Whether a call of ``tool`` (the server's name) waits for a person's approval."""
        return self.needs_approval or tool in self.approval_tools

    def where(self) -> str:
        """Where the server is, for messages: the command's name or the URL without its
        query and credentials (never ``env`` nor ``headers``)."""
        if self.command is not None:
            return Path(self.command).name
        assert self.url is not None
        from ...urls import redact

        return redact(self.url.split("?", 1)[0])


def servers_from_json(data: object, *, source: str = "mcp.json", base: Path | None = None) -> list[McpServer]:
    """The servers of an ``mcp.json`` document (``{"mcpServers": {name: {...}}}``, the
    format desktop hosts and editors read).

    Each entry has ``command``/``args``/``env``/``cwd`` or ``url``/``headers``, and may
    add dormant's keys: ``timeout``, ``toolTimeouts``, ``maxCallSeconds``, ``startTimeout``,
    ``idempotent``, ``idempotentTools``, ``needsApproval``, ``approvalTools``,
    ``approvalSeconds``, ``refreshSeconds``, ``maxTools``, ``maxToolsBytes``,
    ``maxMessageBytes``; ``"disabled": true`` skips it. A relative ``cwd`` is taken from
    ``base``. Raises :class:`UsageError` naming the entry and key that is wrong.
    """
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise UsageError(f'{source}: expected an object with "mcpServers": {{name: {{...}}}}')
    servers: list[McpServer] = []
    for name, entry in data["mcpServers"].items():
        where = f"{source}: server {name!r}"
        if not isinstance(entry, dict):
            raise UsageError(f"{where} must be an object")
        unknown = sorted(set(entry) - _KEYS)
        if unknown:
            raise UsageError(f"{where}: unknown key(s) {', '.join(unknown)}")
        if entry.get("disabled") is True:
            continue
        kind = entry.get("type", entry.get("transport"))
        if kind is not None and kind not in ("stdio", "http", "streamable-http", "streamableHttp"):
            raise UsageError(f"{where}: transport {kind!r} is not supported (stdio or streamable HTTP)")
        cwd = _opt(entry, "cwd", str, where)
        if cwd is not None and base is not None and not Path(cwd).is_absolute():
            cwd = str(base / cwd)
        try:
            servers.append(
                McpServer(
                    name=str(name),
                    command=_opt(entry, "command", str, where),
                    args=tuple(_list(entry, "args", where)),
                    env=_map(entry, "env", where),
                    cwd=cwd,
                    url=_opt(entry, "url", str, where),
                    headers=_map(entry, "headers", where),
                    timeout=_num(entry, "timeout", 60.0, where),
                    tool_timeouts={k: float(v) for k, v in _map(entry, "toolTimeouts", where, float).items()},
                    max_call_s=_num(entry, "maxCallSeconds", 600.0, where),
                    start_timeout=_num(entry, "startTimeout", 30.0, where),
                    idempotent=bool(_opt(entry, "idempotent", bool, where) or False),
                    idempotent_tools=frozenset(_list(entry, "idempotentTools", where)),
                    needs_approval=bool(_opt(entry, "needsApproval", bool, where) or False),
                    approval_tools=frozenset(_list(entry, "approvalTools", where)),
                    approval_s=_num(entry, "approvalSeconds", 0.0, where) or None,
                    refresh_s=_num(entry, "refreshSeconds", 300.0, where),
                    max_tools=int(_num(entry, "maxTools", DEFAULT_MAX_TOOLS, where)),
                    max_tools_bytes=int(_num(entry, "maxToolsBytes", DEFAULT_MAX_TOOLS_BYTES, where)),
                    max_message_bytes=int(_num(entry, "maxMessageBytes", DEFAULT_MAX_MESSAGE_BYTES, where)),
                )
            )
        except UsageError as exc:
            raise UsageError(f"{source}: {exc}") from None
    return servers


def load_mcp_json(path: str | Path) -> list[McpServer]:
    """The servers of the ``mcp.json`` file at ``path`` (see :func:`servers_from_json`);
    a relative ``cwd`` is relative to the file's directory. Raises :class:`UsageError`
    for a file that cannot be read or parsed."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot be read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not valid JSON: {exc}") from None
    return servers_from_json(data, source=str(path), base=path.parent)


def check_unique(servers: Sequence[McpServer]) -> None:
    """Raise :class:`UsageError` if two different servers share a name (one process per
    server per worker: a name means one server)."""
    seen: dict[str, McpServer] = {}
    for server in servers:
        other = seen.setdefault(server.name, server)
        if other is not server and other != server:
            raise UsageError(f"two different MCP servers are named {server.name!r}")


def _opt(entry: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = entry.get(key)
    if value is not None and not isinstance(value, kind):
        raise UsageError(f"{where}: {key!r} must be a {kind.__name__}")
    return value


def _num(entry: dict[str, Any], key: str, default: float, where: str) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: {key!r} must be a number")
    return float(value)


def _list(entry: dict[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise UsageError(f"{where}: {key!r} must be a list of strings")
    return value


def _map(entry: dict[str, Any], key: str, where: str, kind: type = str) -> dict[str, Any]:
    value = entry.get(key, {})
    if not isinstance(value, dict):
        raise UsageError(f"{where}: {key!r} must be an object")
    for k, v in value.items():
        ok = isinstance(v, int | float) and not isinstance(v, bool) if kind is float else isinstance(v, kind)
        if not ok:
            # the value may be a secret: name the key only
            raise UsageError(f"{where}: {key}[{k!r}] must be a {'number' if kind is float else 'string'}")
    return value
