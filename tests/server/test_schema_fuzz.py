"""Schemathesis against the published OpenAPI schema: generated requests, 0 server errors.

A live loopback server in a thread of its own; every operation but the endless
event stream is fuzzed with a bounded number of examples, authenticated as one tenant
(and, for a share of cases, with a bad key). Any 5xx fails the test.

Schemathesis draws valid Unicode only; a hypothesis property on the same server sends
every text field of every route (tests/server/test_text_inputs.py's ``ROUTES``) arbitrary
text: lone surrogates, NUL, astral planes and sizes up to past the body limit.
"""

from __future__ import annotations

import asyncio
import tempfile
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dormant.agent import Agent
from dormant.config import Settings
from dormant.memory import HashingEmbedder
from dormant.models import echo_model
from dormant.runtime import Runtime
from dormant.server import ServerConfig, create_app
from dormant.server.main import listen
from dormant.store import open_store
from tests.server.test_text_inputs import ROUTES, Route, raw

# a file store: the key is made on another event loop than the server's, with the store
# closed in between (a memory:// store would forget it)
STORE = f"sqlite:///{tempfile.mkdtemp(prefix='dormant-fuzz-')}/fuzz.db"
RUNTIME = Runtime(
    STORE,
    [Agent(name="assistant", model=echo_model())],
    settings=Settings.build(poll_s=0.05),
    memory_embedder=HashingEmbedder(),  # the memory routes, without a model download
)
APP = create_app(RUNTIME, ServerConfig(reply_timeout_s=5, heartbeat_s=1))
schema = schemathesis.openapi.from_dict(APP.openapi()).exclude(path_regex=r".*/events$")


@pytest.fixture(scope="module")
def live() -> Iterator[tuple[str, str]]:
    """The server's base URL and a tenant's API key."""

    async def make_key() -> str:
        store = open_store(STORE)  # closed again here: the app's lifespan opens its own
        await store.open()
        try:
            tenant = await store.create_tenant("fuzz")
            return (await store.create_key(tenant.id))[1]
        finally:
            await store.close()

    key = asyncio.run(make_key())
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(APP, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(500):
        if server.started:
            break
        threading.Event().wait(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", key
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@schema.parametrize()
@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors(case: schemathesis.Case[Any], live: tuple[str, str]) -> None:
    url, key = live
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=20)
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path}: {response.status_code} {response.text}"
    )
    if response.status_code >= 400:
        assert "error" in response.json()


#: Arbitrary text: any code point (surrogates and NUL included), and long runs.
TEXT = st.one_of(
    st.text(st.characters(exclude_categories=()), max_size=64),
    st.text(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=4),
    st.builds(lambda c, n: c * n, st.characters(exclude_categories=()), st.integers(0, 120_000)),
)


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=TEXT, route=st.sampled_from(ROUTES))
def test_arbitrary_unicode_and_sizes_never_make_a_server_error(
    live: tuple[str, str], text: str, route: Route
) -> None:
    url, key = live
    method, path, build = route
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as h:
        r = h.request(method, path, content=raw(build(text)), headers={"content-type": "application/json"})
    assert r.status_code < 500, (path, repr(text[:40]), len(text), r.status_code, r.text[:300])
    if r.status_code >= 400:
        assert "error" in r.json()
