"""Tools from real MCP servers, through the outbox: a scripted agent calls each server,
and the result reaches the thread as the call's one tool result."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.records import Message
from dormant.tools.mcp import McpServer
from dormant.tools.mcp.link import McpFailure, ServerLink
from dormant.tools.mcp.stdio import StderrTail
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings
from tests.mcp_servers import everything_server, faulty_server, git_server, make_repo, time_server

REF = re.compile(r"sha256:[0-9a-f]{64}")


class Caller:
    """A scripted model that calls ``calls[thread]`` (tool, arguments), then says what it got."""

    def __init__(self, calls: dict[str, tuple[str, dict[str, object]]]) -> None:
        self.calls = calls
        self.seen_tools: list[dict[str, Any]] = []

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.seen_tools = [dict(t) for t in req.tools]
        last = req.messages[-1]
        if last.role == "user":
            name, args = self.calls[req.thread_id]
            return ModelReply(text="", tool_calls=(ToolCall(id="c1", name=name, arguments=json.dumps(args)),))
        return ModelReply(text="got it")


async def run_calls(
    tmp_path: Path,
    servers: Sequence[McpServer],
    calls: dict[str, tuple[str, dict[str, object]]],
    timeout: float = 60,
) -> tuple[dict[str, list[Message]], Caller]:
    model = Caller(calls)
    agent = Agent(name="a", model=ScriptedModel(model), mcp=servers)
    async with Runtime(f"sqlite:///{tmp_path}/dormant.db", [agent], settings=fast_settings()) as rt:
        for thread in calls:
            await rt.send(thread, "go", key="k1")
        await rt.run_until_idle(timeout=timeout)
        histories = {thread: await all_messages(rt.store, thread) for thread in calls}
    for history in histories.values():
        check_history(history)
        assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    return histories, model


def failed(result: Message) -> bool:
    """Whether a tool result is an error result (its text says so to the model)."""
    return result.content.startswith("error:")


def tool_result(history: list[Message]) -> Message:
    (result,) = [m for m in history if m.role == "tool"]
    return result


async def test_mcp_server_time_answers_through_the_outbox(tmp_path: Path) -> None:
    histories, model = await run_calls(
        tmp_path, [time_server()], {"t1": ("time__get_current_time", {"timezone": "Europe/Paris"})}
    )
    result = tool_result(histories["t1"])
    assert not failed(result)
    assert json.loads(result.content)["timezone"] == "Europe/Paris"
    shown = {t["function"]["name"]: t["function"] for t in model.seen_tools}
    assert {"time__get_current_time", "time__convert_time"} <= set(shown)
    assert "timezone" in shown["time__get_current_time"]["parameters"]["properties"]


async def test_mcp_server_git_reads_a_repository_the_test_made(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    calls: dict[str, tuple[str, dict[str, object]]] = {
        "status": ("git__git_status", {"repo_path": str(repo)}),
        "log": ("git__git_log", {"repo_path": str(repo), "max_count": 5}),
    }
    histories, _ = await run_calls(tmp_path, [git_server(repo)], calls)
    status = tool_result(histories["status"])
    assert not failed(status) and "notes.txt" in status.content and "main" in status.content
    assert "first commit" in tool_result(histories["log"]).content


async def test_server_everything_echo_structured_image_and_progress(tmp_path: Path) -> None:
    # timeout 1s without progress, a 3 s operation reporting progress every 0.5 s: it completes
    server = everything_server(timeout=1.0)
    calls: dict[str, tuple[str, dict[str, object]]] = {
        "echo": ("everything__echo", {"message": "hello from dormant"}),
        "structured": ("everything__get-structured-content", {"location": "New York"}),
        "image": ("everything__get-tiny-image", {}),
        "long": ("everything__trigger-long-running-operation", {"duration": 3, "steps": 6}),
        "sum": ("everything__get-sum", {"a": 2, "b": 40}),
    }
    agent_histories, _ = await run_calls(tmp_path, [server], calls)
    text = {thread: tool_result(h).content for thread, h in agent_histories.items()}
    assert all(not failed(tool_result(h)) for h in agent_histories.values()), text
    assert "hello from dormant" in text["echo"]
    assert "temperature" in text["structured"]
    assert "42" in text["sum"]
    assert "completed" in text["long"].lower()
    (image,) = tool_result(agent_histories["image"]).parts  # ImageContent: the result's image part
    assert (image.kind, image.media_type) == ("image", "image/png") and image.width > 0 and image.height > 0


async def test_the_faults_of_a_server_end_in_clear_tool_errors_and_nothing_is_lost(tmp_path: Path) -> None:
    expected = {
        "fail": "answered 'fail' with an error: the disk is on fire",
        "is_error": "MCP tool f-is_error/is_error failed: no such ticket",
        "hang": "outcome unknown: MCP tool f-hang/hang sent no result or progress for 1s",
        "exit": "outcome unknown: MCP server 'f-exit' (python) closed its stdout during the call",
        "flood": "sent a message over 1048576 bytes (the limit)",
        "garbage": "sent a line that is not JSON-RPC: 'this is not json'",
        "huge": "sent a message over 1048576 bytes (the limit)",
    }
    # one server process per fault (a hung server would hold up the others' calls)
    servers = [
        faulty_server(name=f"f-{name}", timeout=1.0, max_message_bytes=1024 * 1024) for name in expected
    ]
    calls: dict[str, tuple[str, dict[str, object]]] = {name: (f"f-{name}__{name}", {}) for name in expected}
    histories, model = await run_calls(tmp_path, servers, calls, timeout=120)
    # nine tools a server, over five pages (two a page): all listed
    assert len([t for t in model.seen_tools if str(t["function"]["name"]).startswith("f-hang__")]) == 9
    for name, reason in expected.items():
        result = tool_result(histories[name])
        assert failed(result), name
        assert reason in result.content, (name, result.content)
    assert "stderr: fatal: the server fell over" in tool_result(histories["exit"]).content


async def test_a_server_that_exits_or_hangs_is_started_again_with_backoff(tmp_path: Path) -> None:
    link = ServerLink(faulty_server(timeout=1.0))
    try:
        for fault in ("exit", "hang"):
            with pytest.raises(McpFailure, match=r"outcome is unknown|during the call") as caught:
                await link.call(fault, {}, idle_timeout=1.0)
            assert caught.value.sent
            answer = await link.call("ok", {"text": "back"}, idle_timeout=5.0)
            assert answer.content[0].text == "ok: back"  # type: ignore[union-attr]
        assert link.counters["restarts"] == 2 and link.counters["timeouts"] == 1
    finally:
        await link.close()


async def test_a_server_that_cannot_start_fails_its_calls_clearly_without_showing_secrets(
    tmp_path: Path,
) -> None:
    secret = "s3cr3t-token-value"
    server = McpServer(
        name="broken", command="/nonexistent/mcp-server", env={"API_TOKEN": secret}, start_timeout=2
    )
    agent = Agent(name="a", model=ScriptedModel(Caller({})), mcp=[server])
    async with Runtime(f"sqlite:///{tmp_path}/dormant.db", [agent], settings=fast_settings()) as rt:
        await rt.mcp.start()
        (status,) = rt.mcp.status()
        assert status.tools == () and status.error is not None
        assert "broken" in status.error and "could not start" in status.error
        assert secret not in status.error and secret not in repr(server)
        assert agent.toolbox.get("broken__x") is None
    with pytest.raises(Exception, match="exactly one of"):
        McpServer(name="x")


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    """The SDK-built streamable-HTTP server on a free 127.0.0.1 port; its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    root = Path(__file__).resolve().parent.parent.parent
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.mcp_http_server", str(port), HTTP_TOKEN], cwd=root
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as conn:
                if conn.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


HTTP_TOKEN = "tok-9f8e7d6c5b4a"


async def test_a_streamable_http_server_with_headers_answers_through_the_outbox(
    tmp_path: Path, http_server: str
) -> None:
    server = McpServer(
        name="http", url=http_server, headers={"Authorization": f"Bearer {HTTP_TOKEN}"}, timeout=1.0
    )
    calls: dict[str, tuple[str, dict[str, object]]] = {
        "add": ("http__add", {"a": 40, "b": 2}),
        "slow": ("http__slow", {"steps": 6}),  # 1.8 s, progress every 0.3 s: the 1 s timeout never ends it
    }
    histories, _ = await run_calls(tmp_path, [server], calls)
    assert tool_result(histories["add"]).content == "42"
    assert tool_result(histories["slow"]).content == "slow done after 6 steps"


async def test_a_refused_http_server_never_shows_its_headers(tmp_path: Path, http_server: str) -> None:
    wrong = "Bearer wrong-secret-123"
    link = ServerLink(
        McpServer(name="http", url=http_server, headers={"Authorization": wrong}, start_timeout=5)
    )
    try:
        with pytest.raises(McpFailure) as caught:
            await link.call("add", {"a": 1, "b": 2}, idle_timeout=2.0)
    finally:
        await link.close()
    assert not caught.value.sent and "could not start" in str(caught.value)
    assert "wrong-secret-123" not in str(caught.value) and "127.0.0.1" in str(caught.value)


async def test_mcp_calls_failures_timeouts_and_restarts_are_counted_on_metrics(tmp_path: Path) -> None:
    from dormant.ops.exporter import Exporter, render

    agent = Agent(name="a", model=ScriptedModel(Caller({})), mcp=[faulty_server(timeout=1.0)])
    async with Runtime(f"sqlite:///{tmp_path}/dormant.db", [agent], settings=fast_settings()) as rt:
        link = rt.mcp.links["faulty"]
        await link.call("ok", {"text": "a"}, idle_timeout=5.0)
        for fault in ("hang", "exit"):
            with pytest.raises(McpFailure):
                await link.call(fault, {}, idle_timeout=1.0)
        await link.call("ok", {"text": "b"}, idle_timeout=5.0)
        body, _ = await render(Exporter(rt))
        await rt.mcp.close()
    text = body.decode()
    for event, n in (("calls", 4), ("failures", 2), ("timeouts", 1), ("restarts", 2)):
        assert f'dormant_mcp_total{{event="{event}",server="faulty"}} {n:.1f}' in text, event


async def test_a_tool_listing_is_cut_at_its_entry_and_byte_bounds() -> None:
    for options, kept in (({"max_tools": 3}, 3), ({"max_tools_bytes": 300}, 2)):
        link = ServerLink(faulty_server(None, "faulty", **options))
        try:
            tools, cut = await link.list_tools()
        finally:
            await link.close()
        assert cut and [t.name for t in tools] == ["ok", "fail", "is_error"][:kept], options


def test_stderr_is_kept_within_its_byte_bound() -> None:
    tail = StderrTail(100)
    for n in range(1000):
        tail.add(b"line %d " % n + b"x" * 30)
    assert tail.size <= 100 and "line 999" in tail.text()
    tail.add(b"y" * 10_000)
    assert tail.size == 100
