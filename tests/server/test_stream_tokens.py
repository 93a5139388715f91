"""Event-stream tokens: what a browser's EventSource passes in the URL instead of an API key."""

from __future__ import annotations

import asyncio
import json
import logging
import time

import httpx
import pytest

from dormant.agent import Agent
from dormant.errors import Unauthenticated, UsageError
from dormant.models import echo_model
from dormant.server import ServerConfig
from dormant.server.tokens import StreamTokens
from tests.server.support import Event, Served, events, serve

AGENTS = [Agent(name="assistant", model=echo_model())]


async def first_status(client: httpx.AsyncClient, url: str) -> Event:
    async with client.stream("GET", url) as r:
        assert r.status_code == 200, await r.aread()
        async with asyncio.timeout(10):
            async for event in events(r):
                if event.event == "status":
                    return event
    raise AssertionError("no status event")


async def status_of(client: httpx.AsyncClient, url: str, **params: str) -> httpx.Response:
    """The answer's status and error body, without reading an event stream to its end."""
    async with asyncio.timeout(10), client.stream("GET", url, params=params or None) as r:
        if r.status_code != 200:
            await r.aread()
        return r


def error_of(r: httpx.Response) -> str:
    message = json.loads(r.content)["error"]["message"]
    assert isinstance(message, str)
    return message


async def token_for(s: Served, thread: str, key: str | None = None) -> str:
    async with s.client(key) as c:
        r = await c.post(f"/v1/threads/{thread}/events/token")
        assert r.status_code == 200, r.text
        body = r.json()
        assert set(body) == {"token", "expires_at"}
        token = body["token"]
        assert isinstance(token, str)
        return token


async def test_a_token_opens_its_threads_events_without_a_key(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="dormant.server.access")
    async with serve(AGENTS) as s:
        async with s.client() as c:
            await c.post("/v1/threads", json={"id": "t"})
            await c.post("/v1/threads", json={"id": "u"})
            before = time.time()
            r = await c.post("/v1/threads/t/events/token")
        body = r.json()
        assert before + 299 <= body["expires_at"] <= time.time() + 301  # 5 minutes by default
        token = body["token"]
        secret = s.key_a.split("_")[-1]
        assert s.key_a not in token and secret not in token  # never the API key
        async with httpx.AsyncClient(base_url=s.url, timeout=30) as anonymous:  # no Authorization
            status = await first_status(anonymous, f"/v1/threads/t/events?token={token}")
            assert json.loads(status.data)["status"] == "active"
            other = await status_of(anonymous, f"/v1/threads/u/events?token={token}")  # another thread
            assert other.status_code == 401
            assert json.loads(other.content)["error"]["code"] == "unauthenticated"
            elsewhere = await status_of(anonymous, f"/v1/threads/t?token={token}")  # another route
            assert elsewhere.status_code == 401
            forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
            assert (await status_of(anonymous, f"/v1/threads/t/events?token={forged}")).status_code == 401
            for junk in ("x", "ev1.t000000000000.1.abc", "a" * 80):
                r = await status_of(anonymous, "/v1/threads/t/events", token=junk)
                assert r.status_code in (401, 422), (junk, r.status_code)
                assert r.status_code != 401 or "token" in error_of(r)
            assert (await status_of(anonymous, "/v1/threads/t/events")).status_code == 401  # neither
    assert token not in caplog.text  # the access log names the route template, never the query


async def test_tokens_are_tenant_scoped() -> None:
    async with serve(AGENTS) as s:
        async with s.client() as a:
            await a.post("/v1/threads", json={"id": "t"})
        async with s.client(s.key_b) as b:
            assert (await b.post("/v1/threads/t/events/token")).status_code == 404  # A's thread
            await b.post("/v1/threads", json={"id": "mine"})
        token_b = await token_for(s, "mine", s.key_b)
        async with httpx.AsyncClient(base_url=s.url, timeout=30) as anonymous:
            r = await status_of(anonymous, f"/v1/threads/t/events?token={token_b}")
            assert r.status_code == 401  # bound to B's thread "mine", not to A's "t"
        tenant_b = (await s.runtime.store.tenant("bravo")).id
        assert token_b.split(".")[1] == tenant_b


async def test_an_expired_token_or_one_of_another_server_is_refused() -> None:
    config = ServerConfig(stream_token_ttl_s=1, poll_s=0.2)
    async with serve(AGENTS, config=config) as s:
        async with s.client() as c:
            await c.post("/v1/threads", json={"id": "t"})
        token = await token_for(s, "t")
        tenant = (await s.runtime.store.tenant("acme")).id
        stranger, _ = StreamTokens(secret=b"s" * 32).issue(tenant, "t")  # valid shape, other secret
        async with httpx.AsyncClient(base_url=s.url, timeout=30) as anonymous:
            await first_status(anonymous, f"/v1/threads/t/events?token={token}")
            r = await status_of(anonymous, f"/v1/threads/t/events?token={stranger}")
            assert r.status_code == 401 and "another server" in error_of(r)
            await asyncio.sleep(1.2)
            r = await status_of(anonymous, f"/v1/threads/t/events?token={token}")
            assert r.status_code == 401 and "expired" in error_of(r)


async def test_the_same_secret_makes_tokens_valid_on_every_server() -> None:
    secret = "x" * 40
    config = ServerConfig(stream_token_secret=secret, poll_s=0.2)
    async with serve(AGENTS, config=config) as s:
        async with s.client() as c:
            await c.post("/v1/threads", json={"id": "t"})
        tenant = (await s.runtime.store.tenant("acme")).id
        token, _ = StreamTokens.from_secret(secret).issue(tenant, "t")
        async with httpx.AsyncClient(base_url=s.url, timeout=30) as anonymous:
            await first_status(anonymous, f"/v1/threads/t/events?token={token}")


def test_stream_tokens_unit() -> None:
    tokens = StreamTokens(secret=b"k" * 32, ttl_s=60)
    token, expires = tokens.issue("t0123456789ab", "thread-1", now=1000.0)
    assert expires == 1060
    assert tokens.verify(token, "thread-1", now=1059.0) == "t0123456789ab"
    with pytest.raises(Unauthenticated, match="expired"):
        tokens.verify(token, "thread-1", now=1060.0)
    with pytest.raises(Unauthenticated, match="not valid"):
        tokens.verify(token, "thread-2", now=1000.0)
    tenant_swapped = token.replace("t0123456789ab", "t0123456789ac")
    with pytest.raises(Unauthenticated, match="not valid"):
        tokens.verify(tenant_swapped, "thread-1", now=1000.0)
    later = token.replace(".1060.", ".9999.")
    with pytest.raises(Unauthenticated, match="not valid"):
        tokens.verify(later, "thread-1", now=1000.0)
    with pytest.raises(UsageError, match="at least 32"):
        StreamTokens.from_secret("short")
    with pytest.raises(UsageError, match="1 to 3600"):
        StreamTokens(ttl_s=7200)
    assert StreamTokens().secret != StreamTokens().secret  # random per process when unset
