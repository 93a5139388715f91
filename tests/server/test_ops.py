"""Operating the server: access log, request ids, HTTP metrics, CORS, /docs, thread-id errors."""

from __future__ import annotations

import json
import logging
import re

import pytest

from dormant.agent import Agent
from dormant.cli.main import EventFormatter
from dormant.errors import UsageError
from dormant.logs import JsonFormatter
from dormant.models import echo_model
from dormant.server import ServerConfig
from dormant.server.cors import cors_origins
from tests.server.support import serve

AGENTS = [Agent(name="assistant", model=echo_model())]


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "dormant.server.access" and r.getMessage() == "http_request"
    ]


async def test_every_request_has_an_access_line_with_template_tenant_status_and_request_id(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="dormant.server.access")
    async with serve(AGENTS) as s, s.client() as c:
        tenant = (await s.runtime.store.tenant("acme")).id
        r = await c.post(
            "/v1/threads/secret-id/inputs?x=1", json={"content": "hi"}, headers={"X-Request-Id": "req-1.a:b"}
        )
        assert r.status_code == 202
        assert r.headers["X-Request-Id"] == "req-1.a:b"  # echoed as sent
        generated = (await c.get("/healthz")).headers["X-Request-Id"]
        assert re.fullmatch(r"[0-9a-f]{32}", generated)  # made when absent
        await c.get("/v1/threads/secret-id", headers={"Authorization": "Bearer nope"})
    lines = access_records(caplog)
    first = next(r for r in lines if r.__dict__["request_id"] == "req-1.a:b")
    assert first.levelno == logging.INFO
    facts = {k: first.__dict__[k] for k in ("method", "route", "tenant", "status", "request_id")}
    assert facts == {
        "method": "POST",
        "route": "/v1/threads/{thread_id}/inputs",  # the template: no id, no query string
        "tenant": tenant,
        "status": 202,
        "request_id": "req-1.a:b",
    }
    assert isinstance(first.__dict__["ms"], float) and first.__dict__["ms"] >= 0
    refused = next(r for r in lines if r.__dict__["status"] == 401)
    assert refused.__dict__["tenant"] == "-" and refused.__dict__["route"] == "/v1/threads/{thread_id}"
    assert any(r.__dict__["request_id"] == generated and r.__dict__["route"] == "/healthz" for r in lines)
    for formatter in (JsonFormatter(), EventFormatter()):  # both log formats carry the facts
        text = formatter.format(first)
        assert "secret-id" not in text and "x=1" not in text
        for value in ("http_request", "/v1/threads/{thread_id}/inputs", tenant, "202", "req-1.a:b"):
            assert value in text, (formatter, text)
    assert json.loads(JsonFormatter().format(first))["status"] == 202


@pytest.mark.parametrize("sent", ["", "a b", "x" * 129, "naïve", 'a"b', "<script>"])
async def test_a_bad_request_id_is_refused_with_422(sent: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dormant.server.access")
    async with serve(AGENTS) as s, s.client() as c:
        r = await c.get("/v1/threads", headers={b"X-Request-Id": sent.encode("utf-8")})
        assert r.status_code == 422
        assert r.json()["error"]["code"] == "invalid_input" and "X-Request-Id" in r.json()["error"]["message"]
        assert re.fullmatch(r"[0-9a-f]{32}", r.headers["X-Request-Id"])  # a new id, never the bad one
        assert (await c.get("/v1/threads")).status_code == 200  # the connection still serves
    assert any(r.__dict__["status"] == 422 for r in access_records(caplog))


async def test_http_metrics_count_by_template_method_and_status() -> None:
    async with serve(AGENTS) as s, s.client() as c:
        for i in range(3):
            assert (await c.post(f"/v1/threads/m{i}/inputs", json={"content": "x"})).status_code == 202
        await c.get("/v1/threads/m0/messages")
        for i in range(5):  # raw paths no route knows: one label value, whatever the path
            assert (await c.get(f"/nowhere/{i}")).status_code == 404
        assert (await c.put("/v1/threads")).status_code == 405
        body = (await c.get("/metrics")).text
    assert (
        'dormant_http_requests_total{method="POST",route="/v1/threads/{thread_id}/inputs",status="202"} 3.0'
        in body
    )
    assert 'dormant_http_requests_total{method="GET",route="unmatched",status="404"} 5.0' in body
    assert 'dormant_http_requests_total{method="PUT",route="/v1/threads",status="405"} 1.0' in body
    assert (
        "dormant_http_request_duration_seconds_count"
        '{method="POST",route="/v1/threads/{thread_id}/inputs"} 3.0' in body
    )
    assert 'dormant_http_request_duration_seconds_bucket{le="0.1",method="GET"' in body
    assert "/nowhere" not in body and "m0" not in body


async def test_cors_is_off_by_default_and_answers_only_named_origins() -> None:
    preflight = {
        "Origin": "https://app.example.com",
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
    }
    async with serve(AGENTS) as s, s.client() as c:
        r = await c.options("/v1/threads/t/inputs", headers=preflight)
        assert "access-control-allow-origin" not in r.headers
        r = await c.get("/v1/threads", headers={"Origin": "https://app.example.com"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    config = ServerConfig(cors_origins=("https://app.example.com",), poll_s=0.2)
    async with serve(AGENTS, config=config) as s, s.client() as c:
        r = await c.options("/v1/threads/t/inputs", headers=preflight)
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "idempotency-key" in r.headers["access-control-allow-headers"].lower()
        assert "access-control-allow-credentials" not in r.headers
        r = await c.get("/v1/threads", headers={"Origin": "https://app.example.com"})
        assert r.headers["access-control-allow-origin"] == "https://app.example.com"
        assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
        evil = {**preflight, "Origin": "https://evil.example"}
        other = await c.options("/v1/threads/t/inputs", headers=evil)
        assert other.status_code == 400 and "access-control-allow-origin" not in other.headers


@pytest.mark.parametrize(
    "bad", ["app.example.com", "https://app.example.com/", "https://a.example/path", "ftp://x", "https://"]
)
def test_bad_cors_origins_are_usage_errors(bad: str) -> None:
    with pytest.raises(UsageError, match="bad CORS origin"):
        cors_origins([bad])
    assert cors_origins(["https://a.example:8443 http://[::1]:3000", "*", "*"]) == (
        "https://a.example:8443",
        "http://[::1]:3000",
        "*",
    )


async def test_docs_are_off_by_default_and_the_schema_is_served() -> None:
    async with serve(AGENTS) as s, s.client() as c:
        assert (await c.get("/docs")).status_code == 404
        assert (await c.get("/redoc")).status_code == 404
        assert (await c.get("/openapi.json")).status_code == 200
    async with serve(AGENTS, config=ServerConfig(docs=True, poll_s=0.2)) as s, s.client() as c:
        assert "swagger" in (await c.get("/docs")).text.lower()
        assert (await c.get("/redoc")).status_code == 200


async def test_a_malformed_thread_id_is_422_on_every_thread_route() -> None:
    bad = "bad%20id"
    async with serve(AGENTS) as s, s.client() as c:
        r = await c.post("/v1/threads", json={"id": "bad id"})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input"
        calls = [
            c.post(f"/v1/threads/{bad}/inputs", json={"content": "x"}),
            c.get(f"/v1/threads/{bad}"),
            c.get(f"/v1/threads/{bad}/messages"),
            c.get(f"/v1/threads/{bad}/registers"),
            c.get(f"/v1/threads/{bad}/events"),
            c.post(f"/v1/threads/{bad}/events/token"),
            c.post(f"/v1/threads/{bad}/retry"),
            c.post(f"/v1/threads/{bad}/tool_results/call1", json={"content": "x"}),
            c.delete(f"/v1/threads/{bad}"),
            c.get(f"/v1/threads/{'x' * 129}"),
        ]
        for call in calls:
            r = await call
            assert r.status_code == 422, (r.request.url, r.status_code, r.text)
            assert r.json()["error"]["code"] == "invalid_input"
            assert "1-128 characters" in r.json()["error"]["message"]
        assert (await c.get("/v1/threads/fine-id")).status_code == 404  # well formed, absent: 404
