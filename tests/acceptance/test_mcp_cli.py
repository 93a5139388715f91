"""``dormant mcp list``: the servers an ``--app`` names in code and in the mcp.json beside
it, whether each starts, and its tools; secrets in ``env`` never printed."""

from __future__ import annotations

import json
import sys

from tests.acceptance.runner import Cli, assert_usage_error

APP = f"""
from dormant import Agent
from dormant.models import echo_model
from dormant.tools.mcp import McpServer

agents = [Agent(name="a", model=echo_model(),
                mcp=[McpServer(name="time", command={sys.executable!r}, args=("-m", "mcp_server_time"))])]
"""
SECRET = "sk-live-0123456789"


def test_mcp_list_shows_servers_tools_and_which_do_not_start(cli: Cli) -> None:
    (cli.cwd / "mcpapp.py").write_text(APP)
    broken = {"command": "/nonexistent/server", "env": {"TOKEN": SECRET}, "startTimeout": 2}
    (cli.cwd / "mcp.json").write_text(json.dumps({"mcpServers": {"broken": broken}}))
    result = cli("mcp", "list", "--app", "mcpapp:agents", store=False)
    assert result.returncode == 1, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "time (stdio, python): starts"
    assert "  time__get_current_time  (idempotent)" in lines
    assert any(line.startswith("broken (stdio, server): does not start:") for line in lines)
    assert SECRET not in result.stdout + result.stderr
    listed = json.loads(cli("mcp", "list", "--app", "mcpapp:agents", "--json", store=False).stdout)
    assert [(s["name"], s["starts"]) for s in listed] == [("time", True), ("broken", False)]
    assert {t["name"] for t in listed[0]["tools"]} == {"time__get_current_time", "time__convert_time"}


def test_mcp_list_needs_an_app(cli: Cli) -> None:
    assert_usage_error(cli("mcp", "list", store=False), "--app is needed")
