"""The native REST API on a live loopback server: threads, inputs, messages, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from dormant.agent import Agent
from dormant.models import ModelReply, ScriptedModel, Usage, echo_model
from dormant.server import ServerConfig
from tests.helpers import eventually
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]


async def replied(client: httpx.AsyncClient, thread: str, count: int) -> bool:
    page = (await client.get(f"/v1/threads/{thread}/messages")).json()
    return len(page["items"]) >= count


async def test_health_and_openapi_need_no_key() -> None:
    async with serve(AGENTS) as s, s.client(key="") as c:
        assert (await c.get("/healthz")).json() == {"status": "ok", "detail": None}
        assert (await c.get("/readyz")).status_code == 200
        schema = (await c.get("/openapi.json")).json()
        assert "/v1/threads/{thread_id}/inputs" in schema["paths"]
        r = await c.get("/v1/threads")
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "unauthenticated"
        r = await c.get("/v1/threads", headers={"Authorization": "Bearer dk_0123456789abcdef_" + "x" * 43})
        assert r.status_code == 401


async def test_thread_lifecycle_inputs_and_paged_messages() -> None:
    async with serve(AGENTS) as s, s.client() as c:
        r = await c.post("/v1/threads", json={"id": "t1"})
        assert r.status_code == 201 and r.json()["id"] == "t1" and r.json()["agent"] == "assistant"
        for i in range(3):
            r = await c.post(
                "/v1/threads/t1/inputs", json={"content": f"hi {i}"}, headers={"Idempotency-Key": f"k{i}"}
            )
            assert r.status_code == 202, r.text
            assert r.json()["duplicate"] is False
        again = await c.post(
            "/v1/threads/t1/inputs", json={"content": "hi 0"}, headers={"Idempotency-Key": "k0"}
        )
        assert again.status_code == 202 and again.json()["duplicate"] is True

        await eventually(lambda: replied(c, "t1", 6))
        first = (await c.get("/v1/threads/t1/messages", params={"limit": 4})).json()
        assert [m["seq"] for m in first["items"]] == [1, 2, 3, 4]
        rest = (await c.get("/v1/threads/t1/messages", params={"cursor": first["next_cursor"]})).json()
        assert [m["seq"] for m in rest["items"]] == [5, 6] and rest["next_cursor"] is None
        newest = (await c.get("/v1/threads/t1/messages", params={"order": "desc", "limit": 2})).json()
        assert [m["seq"] for m in newest["items"]] == [6, 5]
        contents = [m["content"] for m in first["items"] + rest["items"]]
        assert contents.count("hi 0") == 1 and "echo: hi 2" in contents

        # a new thread is made by its first input; listing is paged and scoped
        assert (await c.post("/v1/threads/t2/inputs", json={"content": "x"})).status_code == 202
        page = (await c.get("/v1/threads", params={"limit": 1})).json()
        assert [t["id"] for t in page["items"]] == ["t1"]
        page = (await c.get("/v1/threads", params={"cursor": page["next_cursor"]})).json()
        assert [t["id"] for t in page["items"]] == ["t2"] and page["next_cursor"] is None

        status = (await c.get("/v1/status")).json()
        assert status["messages"] >= 6
        await eventually(lambda: replied(c, "t2", 2))
        assert (await c.delete("/v1/threads/t2")).status_code == 204
        assert (await c.get("/v1/threads/t2")).status_code == 404


async def test_bad_requests_get_coded_errors_not_500() -> None:
    config = ServerConfig(max_body_bytes=4096)
    async with serve(AGENTS, config=config, max_input_bytes=2048) as s, s.client() as c:
        r = await c.post(
            "/v1/threads/t1/inputs",
            content=b"{" + b" " * 5000 + b"}",
            headers={"Content-Type": "application/json"},
        )
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: counted as it is read
            yield b'{"content": "small"'
            for _ in range(10):
                yield b" " * 1000  # valid JSON, a small input: only the body limit refuses it
            yield b"}"

        r = await c.post(
            "/v1/threads/t1/inputs", content=chunked(), headers={"Content-Type": "application/json"}
        )
        assert (
            r.request.headers.get("transfer-encoding") == "chunked"
            and "content-length" not in r.request.headers
        )
        assert r.status_code == 413
        r = await c.post(
            "/v1/threads/t1/inputs", json={"content": "é" * 1500}
        )  # 3000 bytes: over the input limit
        assert r.status_code == 413
        r = await c.post("/v1/threads/t1/inputs", json={"content": "x", "priority": 7})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
        r = await c.post("/v1/threads/t1/inputs", json={"content": "x", "surprise": 1})
        assert r.status_code == 422
        r = await c.post("/v1/threads/t1/inputs", json={"content": "x", "agent": "nobody"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "usage_error"
        r = await c.post("/v1/threads/bad%20id/inputs", json={"content": "x"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
        r = await c.get("/v1/threads/t1/messages", params={"cursor": "abc"})
        assert r.status_code == 422
        r = await c.post("/v1/threads/nope/retry")
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_messages_and_threads_show_cut_replies_reasoning_and_usage() -> None:
    """What the model server said about a reply reaches HTTP callers."""
    said = ModelReply(
        text="The answer is",
        finish_reason="length",
        reasoning="think",
        usage=Usage(prompt=12, completion=34, cached=8),
    )
    agents = [Agent(name="assistant", model=ScriptedModel(lambda request: said))]
    async with serve(agents) as s, s.client() as c:
        r = await c.post("/v1/threads/t1/inputs", json={"content": "q"}, headers={"Idempotency-Key": "k"})
        assert r.status_code == 202, r.text
        await eventually(lambda: replied(c, "t1", 2))
        user, answer = (await c.get("/v1/threads/t1/messages")).json()["items"]
        assert (user["cut"], user["finish_reason"], user["usage"], user["reasoning"]) == (
            False,
            None,
            None,
            None,
        )
        assert (answer["content"], answer["cut"], answer["finish_reason"], answer["reasoning"]) == (
            "The answer is",
            True,
            "length",
            "think",
        )
        assert answer["usage"] == {"prompt": 12, "completion": 34, "cached": 8}
        thread = (await c.get("/v1/threads/t1")).json()
        assert thread["usage"] == {"prompt": 12, "completion": 34, "cached": 8}
        assert (thread["wait_reason"], thread["wait_until"]) == (None, None)
        status = (await c.get("/v1/status")).json()
        assert status["usage"] == {"prompt": 12, "completion": 34, "cached": 8}
        assert status["threads_waiting"] == 0
        async with s.client(key=s.key_b) as other:  # another tenant's status counts none of it
            assert (await other.get("/v1/status")).json()["usage"] == {
                "prompt": 0,
                "completion": 0,
                "cached": 0,
            }
