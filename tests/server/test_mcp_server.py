"""dormant as an MCP server, driven by the official ``mcp`` client: ``/mcp`` on a live
loopback ``dormant serve`` (streamable HTTP, behind a tenant's API key) and ``dormant
mcp serve`` (stdio, a subprocess); and MCP progress on a thread's event stream."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from typer.testing import CliRunner

from dormant import Agent, ModelReply, ModelRequest, ScriptedModel, ToolCall
from dormant.cli.main import app
from dormant.server import ServerConfig
from tests.helpers import eventually
from tests.mcp_servers import faulty_server
from tests.server.support import Served, events, serve

TOOLS = {"remember", "recall", "forget", "memory_history", "send_to_thread", "read_thread", "thread_status"}


def echo(request: ModelRequest) -> ModelReply:
    return ModelReply(text="echo: " + request.messages[-1].content)


@asynccontextmanager
async def mcp_http(served: Served, key: str) -> AsyncIterator[Client]:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
    async with Client(streamable_http_client(served.url + "/mcp", http_client=http)) as client:
        yield client


async def call(client: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The message of the JSON-RPC invalid-params error ``tool`` answers."""
    with pytest.raises(MCPError) as caught:
        await client.call_tool(tool, arguments)
    assert caught.value.code == types.INVALID_PARAMS, caught.value
    return str(caught.value)


async def memory_round_trip(client: Client) -> None:
    """remember, recall, history, forget, recall again: by identity and by binding key."""
    phone = {"phone": "+1 555-0100"}
    added = await call(client, "remember", text="prefers green tea", identity=phone, kind="preference")
    record = added["record"]
    assert record["text"] == "prefers green tea" and record["subject"].startswith("b2_")
    found = await call(client, "recall", query="tea", identity=phone)
    assert [h["record"]["id"] for h in found["items"]] == [record["id"]]
    by_key = await call(client, "recall", query="tea", subject=record["subject"])
    assert [h["record"]["id"] for h in by_key["items"]] == [record["id"]]
    assert by_key["items"][0]["explain"] is None
    explained = await call(client, "recall", query="tea", identity=phone, explain=True)
    assert explained["items"][0]["explain"], explained
    dated = await call(
        client, "remember", text="visited in May", identity=phone, kind="event", valid_from=1.7e9
    )
    assert dated["record"]["valid_from"] == 1.7e9
    await call(client, "forget", record_id=dated["record"]["id"], identity=phone)
    await call(client, "forget", record_id=record["id"], identity=phone, reason="asked to")
    history = await call(client, "memory_history", record_id=record["id"], subject=record["subject"])
    assert [c["op"] for c in history["items"]][-1] == "forget" and history["next_cursor"] is None
    assert (await call(client, "recall", query="tea", identity=phone))["items"] == []


async def thread_round_trip(client: Client, thread: str = "t1") -> None:
    sent = await call(client, "send_to_thread", thread_id=thread, content="hello", dedup_key="k1")
    assert sent["thread_id"] == thread and not sent["duplicate"]
    again = await call(client, "send_to_thread", thread_id=thread, content="hello", dedup_key="k1")
    assert again["duplicate"] and again["input_id"] == sent["input_id"]

    async def replied() -> bool:
        page = await call(client, "read_thread", thread_id=thread)
        return len(page["items"]) == 2

    await eventually(replied, timeout=20)
    page = await call(client, "read_thread", thread_id=thread, limit=1)
    assert [m["content"] for m in page["items"]] == ["hello"] and page["next_cursor"]
    rest = await call(client, "read_thread", thread_id=thread, cursor=page["next_cursor"])
    assert [m["content"] for m in rest["items"]] == ["echo: hello"]
    status = await call(client, "thread_status", thread_id=thread)
    assert status["id"] == thread and status["status"] == "active" and status["last_seq"] == 2


async def test_mcp_over_http_memory_threads_isolation_and_bad_arguments() -> None:
    async with serve([Agent(name="assistant", model=ScriptedModel(echo))]) as s:
        async with mcp_http(s, s.key_a) as a:
            assert {t.name for t in (await a.list_tools()).tools} == TOOLS
            await memory_round_trip(a)
            await thread_round_trip(a)
            kept = await call(a, "remember", text="allergic to nuts", identity={"phone": "7"})
            record_id, subject = kept["record"]["id"], kept["record"]["subject"]
            # bad arguments: JSON-RPC invalid params, with what is wrong, nothing written
            assert "k" in await refused(a, "recall", query="x", identity={"phone": "7"}, k=1000)
            assert "subject" in await refused(a, "recall", query="x")
            assert "subject" in await refused(a, "recall", query="x", subject=subject, identity={"p": "7"})
            assert "query" in await refused(a, "recall", query=5, identity={"phone": "7"})
            assert "not a binding key" in await refused(a, "memory_history", record_id=record_id, subject="x")
            assert "cursor" in await refused(a, "read_thread", thread_id="t1", cursor="abc")
            assert "bad thread id" in await refused(a, "send_to_thread", thread_id="a b", content="x")
            assert "content" in await refused(a, "send_to_thread", thread_id="t2")
            assert "not_found" in await refused(a, "thread_status", thread_id="t2")  # nothing was admitted
            # the same dedup key with another text is refused
            assert "dedup key" in await refused(
                a, "send_to_thread", thread_id="t1", content="other", dedup_key="k1"
            )
        async with mcp_http(s, s.key_b) as b:
            # another tenant's thread and record are not found; its identity is another subject
            assert "not_found" in await refused(b, "thread_status", thread_id="t1")
            assert "not_found" in await refused(b, "read_thread", thread_id="t1")
            assert "not_found" in await refused(b, "memory_history", record_id=record_id, subject=subject)
            assert "not_found" in await refused(b, "forget", record_id=record_id, subject=subject)
            assert (await call(b, "recall", query="nuts", identity={"phone": "7"}))["items"] == []
            assert (await call(b, "recall", query="nuts", subject=subject))["items"] == []
            await thread_round_trip(b)  # its own t1, apart from tenant A's
        async with mcp_http(s, s.key_a) as a:
            assert (await call(a, "recall", query="nuts", identity={"phone": "7"}))["items"]  # untouched
            assert len((await call(a, "read_thread", thread_id="t1"))["items"]) == 2


async def test_mcp_over_http_refuses_a_missing_or_wrong_api_key() -> None:
    async with serve([Agent(name="assistant", model=ScriptedModel(echo))]) as s:
        init = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        async with httpx.AsyncClient(base_url=s.url) as http:
            for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {s.key_a}"}):
                r = await http.post("/mcp", json=init, headers={**headers, **auth})
                assert r.status_code == 401, r.text
                assert r.json()["error"]["code"] == "unauthenticated"
        with pytest.raises(BaseException):  # noqa: B017 - the SDK wraps the 401 in a task group's error
            async with mcp_http(s, "wrong") as client:
                await client.list_tools()


async def test_mcp_admissions_count_in_the_tenant_quotas_as_rest_ones_do() -> None:
    config = ServerConfig(poll_s=0.2, tenant_max_threads=1)
    agents = [Agent(name="assistant", model=ScriptedModel(echo))]
    async with serve(agents, config=config) as s, mcp_http(s, s.key_a) as a:
        await call(a, "send_to_thread", thread_id="q1", content="one")
        with pytest.raises(MCPError) as caught:
            await call(a, "send_to_thread", thread_id="q2", content="two")
        assert caught.value.code == types.INTERNAL_ERROR and "quota_exceeded" in str(caught.value)
        assert "not_found" in await refused(a, "thread_status", thread_id="q2")  # nothing admitted


def stdio_params(store: str, tenant: str) -> StdioServerParameters:
    env = {**os.environ, "DORMANT_STORE": store, "DORMANT_TENANT": tenant}
    return StdioServerParameters(command=sys.executable, args=["-m", "dormant.cli", "mcp", "serve"], env=env)


async def test_dormant_mcp_serve_over_stdio(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/dormant.db"
    async with serve([Agent(name="assistant", model=ScriptedModel(echo))], store=store) as s:
        # the live server runs the slices; the stdio server (another process) admits and reads
        acme = await s.runtime.store.tenant("acme")
        async with Client(stdio_params(store, "acme")) as a:
            assert {t.name for t in (await a.list_tools()).tools} == TOOLS
            await memory_round_trip(a)
            await thread_round_trip(a, "s1")
            assert "limit" in await refused(a, "read_thread", thread_id="s1", limit=0)
        async with mcp_http(s, s.key_a) as over_http:  # the same tenant's thread, seen over HTTP
            assert (await call(over_http, "thread_status", thread_id="s1"))["last_seq"] == 2
        async with Client(stdio_params(store, "bravo")) as b:
            assert "not_found" in await refused(b, "thread_status", thread_id="s1")
        async with Client(stdio_params(store, acme.id)) as by_id:  # a tenant id works as well as its name
            assert (await call(by_id, "thread_status", thread_id="s1"))["id"] == "s1"
    with pytest.raises(BaseException):  # noqa: B017 - an unknown tenant: the process exits at start
        async with Client(stdio_params(store, "nobody")) as nobody:
            await nobody.list_tools()


class SlowCaller:
    """Calls the faulty server's ``slow`` tool (progress every 0.2 s) once, then says done."""

    def __call__(self, request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "user":
            args = json.dumps({"seconds": 2})
            return ModelReply(text="", tool_calls=(ToolCall(id="c1", name="faulty__slow", arguments=args),))
        return ModelReply(text="done")


async def test_mcp_progress_is_published_on_the_thread_event_stream_rate_limited(tmp_path: Path) -> None:
    agent = Agent(name="assistant", model=ScriptedModel(SlowCaller()), mcp=[faulty_server(timeout=5.0)])
    async with serve([agent]) as s, s.client() as c:
        got: list[tuple[float, dict[str, Any]]] = []  # (when received, event)
        calls: list[str] = []  # the tool call ids of the thread's messages

        async def listen() -> None:
            async with c.stream("GET", "/v1/threads/p1/events") as response:
                async for event in events(response):
                    if event.event == "progress":
                        got.append((time.monotonic(), json.loads(event.data)))
                    if event.event == "message":
                        message = json.loads(event.data)
                        calls.extend(c["id"] for c in message.get("tool_calls") or [])
                        if message["content"] == "done":
                            return

        r = await c.post("/v1/threads", json={"id": "p1"})
        assert r.status_code == 201, r.text
        listener = asyncio.create_task(listen())
        await asyncio.sleep(0.3)  # subscribed before the call starts
        r = await c.post("/v1/threads/p1/inputs", json={"content": "go"})
        assert r.status_code == 202, r.text
        await asyncio.wait_for(listener, 30)
        # dormant status --metrics shows the MCP counts of the running server
        runner = CliRunner()
        args = ["status", "--store", "memory://", "--metrics", s.url, "--json"]
        shown = await asyncio.to_thread(runner.invoke, app, args)
        assert shown.exit_code == 0, shown.output
        counts = json.loads(shown.stdout)["mcp"]["faulty"]
        assert counts["calls"] == 1 and counts["failures"] == 0 and counts["timeouts"] == 0, counts
        table = await asyncio.to_thread(runner.invoke, app, args[:-1])
        assert "MCP faulty" in table.stdout and "calls 1, failures 0, timeouts 0, restarts 0" in table.stdout
        refused = await asyncio.to_thread(runner.invoke, app, ["status", "--metrics", s.url + "/nowhere"])
        assert refused.exit_code == 2 and "answered 404" in refused.output
    # 10 notifications, 0.2 s apart; at most one per 0.25 s (and the last) reaches the stream
    assert 3 <= len(got) <= 7, got
    assert len(calls) == 1 and {e["call_id"] for _, e in got} == set(calls)  # the call as the thread shows it
    steps = [e["progress"] for _, e in got]
    assert steps == sorted(steps) and all(e["total"] == 10 for _, e in got), got
    assert steps[-1] == 10  # the final one is never dropped
