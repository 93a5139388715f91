"""MCP server configuration: ``McpServer`` checks, ``mcp.json`` in the hosts' format, the
names the model sees, and ``mcp.json`` beside an ``--app`` module."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from dormant.cli.apps import load_app
from dormant.errors import UsageError
from dormant.tools.mcp import McpServer, load_mcp_json, servers_from_json
from dormant.tools.mcp.naming import MAX_NAME, model_names
from dormant.tools.spec import ToolBox, make_tool

HOSTS_FORMAT = {
    "mcpServers": {
        "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"GIT_TOKEN": "hunter2"}},
        "remote": {
            "url": "https://mcp.example.com/mcp?key=k",
            "headers": {"Authorization": "Bearer hunter2"},
            "timeout": 5,
            "toolTimeouts": {"slow": 50},
            "idempotentTools": ["search"],
        },
        "off": {"command": "x", "disabled": True},
    }
}


def test_the_hosts_format_is_read_with_dormants_keys() -> None:
    git, remote = servers_from_json(HOSTS_FORMAT)
    assert (git.name, git.transport, git.command, git.args) == ("git", "stdio", "uvx", ("mcp-server-git",))
    assert remote.transport == "http" and remote.timeout_for("slow") == 50 and remote.timeout_for("x") == 5
    assert remote.is_idempotent("search", None) and not remote.is_idempotent("write", None)
    assert remote.is_idempotent("write", True)  # the server's idempotentHint
    assert remote.where() == "https://mcp.example.com/mcp"
    for server in (git, remote):
        assert "hunter2" not in repr(server) and "hunter2" not in server.where()


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"args": []}, "exactly one of 'command'"),
        ({"command": "a", "url": "http://x"}, "exactly one of 'command'"),
        ({"command": "a", "headers": {"A": "b"}}, "'headers' are for an HTTP server"),
        ({"url": "ftp://x"}, "must be an http"),
        ({"command": "a", "timeout": 0}, "timeout must be a positive number"),
        ({"command": "a", "timeout": 900}, "longer than max_call_s"),
        ({"command": "a", "env": {"TOKEN": 12345}}, "env['TOKEN'] must be a string"),
        ({"command": "a", "colour": "red"}, "unknown key(s) colour"),
        ({"command": "a", "type": "sse"}, "transport 'sse' is not supported"),
    ],
)
def test_a_bad_entry_is_refused_naming_the_server_and_key(entry: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError, match=r"server 's1'|'s1'") as caught:
        servers_from_json({"mcpServers": {"s1": entry}})
    assert message in str(caught.value)
    assert "12345" not in str(caught.value)  # a value may be a secret: only its key is named


def test_bad_names_and_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no '__'"):
        McpServer(name="a__b", command="x")
    with pytest.raises(UsageError, match="expected an object"):
        servers_from_json({"servers": {}})
    bad = tmp_path / "mcp.json"
    bad.write_text("{nope")
    with pytest.raises(UsageError, match="not valid JSON"):
        load_mcp_json(bad)
    with pytest.raises(UsageError, match="cannot be read"):
        load_mcp_json(tmp_path / "missing.json")


def test_model_names_are_unique_short_and_safe() -> None:
    names = model_names("git", ["status", "a.b", "a_b", "x" * 80, "ünï"])
    assert names["status"] == "git__status" and names["a_b"] == "git__a_b"
    assert len(set(names.values())) == 5
    for shown in names.values():
        assert len(shown) <= MAX_NAME and shown.startswith("git__")
        assert all(c.isascii() and (c.isalnum() or c in "_-") for c in shown)
    assert model_names("git", ["a.b"]) == {"a.b": "git__a_b"}  # no clash: no hash


def test_found_tools_never_take_a_given_tools_name() -> None:
    def given() -> str:
        return "x"

    box = ToolBox([make_tool(given, name="git__status")])
    found = [make_tool(given, name="git__status"), make_tool(given, name="git__log")]
    assert box.set_found("git", found) == ["git__status"]
    assert box.names() == ("git__status", "git__log")
    assert box.get("git__status") is not found[0]
    box.set_found("git", [])
    assert box.names() == ("git__status",) and len(box.schemas) == 1


def test_an_mcp_json_beside_the_app_module_gives_its_agents_the_servers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "myapp_mcp.py").write_text(
        "from dormant import Agent\nfrom dormant.models import echo_model\n"
        "from dormant.tools.mcp import McpServer\n"
        "agents = [Agent(name='a', model=echo_model(), mcp=[McpServer(name='git', command='mine')]),\n"
        "          Agent(name='b', model=echo_model())]\n"
    )
    (tmp_path / "mcp.json").write_text(json.dumps(HOSTS_FORMAT))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        a, b = load_app("myapp_mcp:agents")
    finally:
        sys.modules.pop("myapp_mcp", None)
    assert [(s.name, s.command) for s in a.mcp] == [("git", "mine"), ("remote", None)]  # its own git kept
    assert [s.name for s in b.mcp] == ["git", "remote"]
    (tmp_path / "mcp.json").write_text('{"mcpServers": {"x": {}}}')
    with pytest.raises(UsageError, match=r"mcp\.json: MCP server .x. needs exactly one"):
        load_app("myapp_mcp:agents")
    sys.modules.pop("myapp_mcp", None)


def test_mcp_tools_can_be_marked_as_needing_approval() -> None:
    from types import SimpleNamespace
    from typing import Any, cast

    from mcp import types

    from dormant.tools.mcp.hub import tool_specs

    (server,) = servers_from_json(
        {"mcpServers": {"shop": {"command": "x", "approvalTools": ["refund"], "approvalSeconds": 60}}}
    )
    assert server.needs_approval_of("refund") and not server.needs_approval_of("lookup")
    listed = [types.Tool(name=n, input_schema={"type": "object"}) for n in ("refund", "lookup")]
    specs = {s.name: s for s in tool_specs(cast(Any, SimpleNamespace(config=server)), listed)}
    refund = specs["shop__refund"].approval
    assert refund is not None and refund.deadline_s == 60
    assert specs["shop__lookup"].approval is None
    (every,) = servers_from_json({"mcpServers": {"s": {"command": "x", "needsApproval": True}}})
    assert every.needs_approval_of("anything") and every.approval_s is None
    with pytest.raises(UsageError, match="needsApproval"):
        servers_from_json({"mcpServers": {"s": {"command": "x", "needsApproval": "yes"}}})
