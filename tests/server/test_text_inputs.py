"""Every text field of every route: arbitrary Unicode and sizes never make a 5xx.

Lone surrogates and NUL are refused with 422 ``invalid_input`` naming the field, on
every route, and nothing is written; the keep-alive connection survives the refusal.
A hypothesis property sends arbitrary text (surrogates, NUL, astral planes, long) to
each route's text fields and asserts no 5xx.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx

from dormant.agent import Agent
from dormant.memory import HashingEmbedder
from dormant.models.scripted import ScriptedModel, echo_script
from dormant.server.validation import body_problems
from tests.server.support import serve

KEY = "b1_" + "0" * 64
JSON = {"content-type": "application/json"}


def chat(text: str | list[dict[str, str]], **extra: Any) -> dict[str, Any]:
    """A Chat Completions body whose one user message is ``text``."""
    return {"model": "assistant", "messages": [{"role": "user", "content": text}], **extra}


#: (method, path, body builder): every route that takes text in a JSON body.
Route = tuple[str, str, Callable[[str], dict[str, Any]]]
ROUTES: list[Route] = [
    ("POST", "/v1/threads/t1/inputs", lambda t: {"content": t}),
    ("POST", "/v1/threads/t1/inputs", lambda t: {"content": "x", "identity": {"phone": t}}),
    ("POST", "/v1/threads", lambda t: {"id": "t2", "identity": {t: "x"}}),
    ("POST", "/v1/threads/t1/tool_results/call-1", lambda t: {"content": t}),
    ("POST", "/v1/chat/completions", lambda t: chat(t)),
    ("POST", "/v1/chat/completions", lambda t: chat(t, stream=True, user="u")),
    ("POST", "/v1/chat/completions", lambda t: chat([{"type": "text", "text": t}])),
    ("POST", "/v1/responses", lambda t: {"model": "assistant", "input": t}),
    ("POST", "/v1/responses", lambda t: {"model": "assistant", "input": t, "stream": True}),
    ("POST", "/v1/memory", lambda t: {"text": t, "subject": KEY}),
    ("POST", "/v1/memory/recall", lambda t: {"query": t, "subjects": [KEY]}),
    ("POST", "/v1/memory/bind", lambda t: {"identity": {"phone": t}}),
]


def raw(body: dict[str, Any]) -> bytes:
    """JSON as a client that escapes everything sends it (surrogates as ``\\ud800``)."""
    return json.dumps(body, ensure_ascii=True).encode()


def agents() -> list[Agent]:
    return [Agent(name="assistant", model=ScriptedModel(echo_script))]


async def test_a_lone_surrogate_or_nul_is_422_on_every_route_and_keeps_the_connection() -> None:
    async with serve(agents()) as s, s.client() as h:
        s.runtime.memory_embedder = HashingEmbedder()  # no model: memory is built on first use
        assert (await h.post("/v1/threads/t1/inputs", json={"content": "first"})).status_code == 202
        for bad in ("a\ud800b", "a\x00b", "\udfff"):
            for method, path, build in ROUTES:
                r = await h.request(
                    method, path, content=raw(build(bad)), headers={"content-type": "application/json"}
                )
                assert r.status_code == 422, (path, bad, r.status_code, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid_input"
                assert ("lone surrogate" in error["message"]) or ("NUL" in error["message"])
                assert "body." in error["message"]  # names the field
        # the refused requests wrote nothing: the thread has its one input
        page = (await h.get("/v1/threads/t1/messages")).json()["items"]
        assert [m["content"] for m in page if m["role"] == "user"] == ["first"]
        # a query string and a body that is not UTF-8
        r = await h.get("/v1/threads", params={"cursor": "a\x00"})
        assert r.status_code == 422 and "query" in r.json()["error"]["message"]
        r = await h.post("/v1/threads/t1/inputs", content=b'{"content": "\xff\xfe"}', headers=JSON)
        assert r.status_code == 422 and "UTF-8" in r.json()["error"]["message"]


async def test_keep_alive_survives_a_refused_request() -> None:
    """One connection: a refused request, then a good one on the same socket."""
    async with serve(agents()) as s:
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with s.client(limits=limits) as h:
            bad = await h.post("/v1/threads/t1/inputs", content=b'{"content": "a\\ud800"}', headers=JSON)
            assert bad.status_code == 422
            assert bad.headers.get("connection", "").lower() != "close"
            good = await h.post("/v1/threads/t1/inputs", json={"content": "ok"})
            assert good.status_code == 202


def test_body_problems_names_each_field_and_leaves_plain_bodies_alone() -> None:
    assert body_problems(b'{"content": "plain \\u00e9"}') == []
    assert body_problems(b"not json \\u0000") == []  # the route's own validation refuses it
    found = body_problems(raw({"a": ["ok", "x\ud800"], "b\x00": 1}))
    assert any("body.a.1" in f and "lone surrogate" in f for f in found)
    assert any("key" in f and "NUL" in f for f in found)
