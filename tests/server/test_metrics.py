"""``/metrics`` on the server: the runtime's Prometheus exporter, open or behind its own token."""

from __future__ import annotations

import re

import httpx

from dormant.agent import Agent
from dormant.models import echo_model
from dormant.server import ServerConfig
from tests.helpers import eventually
from tests.server.support import serve


def sample(text: str, name: str) -> float:
    """The value of an unlabelled sample in a Prometheus text page."""
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def test_metrics_are_the_runtimes_and_open_without_a_token() -> None:
    async with (
        serve([Agent(name="assistant", model=echo_model())]) as s,
        s.client() as a,
        httpx.AsyncClient(base_url=s.url) as anon,
    ):
        r = await anon.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        assert sample(r.text, "dormant_slices_total") == 0
        assert sample(r.text, "dormant_rss_bytes") > 0
        await a.post("/v1/threads/t1/inputs", json={"content": "hi"})

        async def counted() -> bool:
            return sample((await anon.get("/metrics")).text, "dormant_slices_total") >= 1

        await eventually(counted)  # the slices this process ran, counted by its exporter
        assert "/metrics" not in (await a.get("/openapi.json")).text


async def test_a_metrics_token_guards_metrics_and_no_tenant_key_opens_them() -> None:
    config = ServerConfig(poll_s=0.2, metrics_token="metrics-secret")
    async with (
        serve([Agent(name="assistant", model=echo_model())], config=config) as s,
        httpx.AsyncClient(base_url=s.url) as anon,
    ):
        for headers in (
            {},
            {"Authorization": f"Bearer {s.key_a}"},  # a tenant's key: counts are store-wide
            {"Authorization": "Bearer metrics-wrong"},
            {"Authorization": "Basic metrics-secret"},
        ):
            r = await anon.get("/metrics", headers=headers)
            assert r.status_code == 401, headers
            assert r.json()["error"]["code"] == "unauthenticated"
            assert r.headers["www-authenticate"] == "Bearer"
        r = await anon.get("/metrics", headers={"Authorization": "Bearer metrics-secret"})
        assert r.status_code == 200 and "dormant_threads_ready" in r.text
        assert (await anon.get("/healthz")).status_code == 200  # health stays open
        assert (await anon.get("/readyz")).status_code == 200
