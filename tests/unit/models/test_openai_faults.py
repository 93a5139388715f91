"""Faults a real endpoint shows: outages and the circuit breaker, context
overflow, wrong URLs, on a loopback server (:mod:`tests.openai_server`)."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from dormant.errors import ModelError
from dormant.models import breaker as breakers
from dormant.models.breaker import CircuitBreaker
from dormant.models.openai import OpenAIChatModel, redact
from tests.openai_server import (
    Reply,
    ScriptServer,
    fresh_breakers,
    make_model,
    make_request,
    no_env_key,
    run,
    server,
    text_reply,
)

__all__ = ["fresh_breakers", "no_env_key", "server"]  # fixtures, used by name


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- the breaker alone


def test_the_breaker_opens_after_threshold_failures_and_probes_after_the_cooldown() -> None:
    clock = Clock()
    breaker = CircuitBreaker("http://h/v1", threshold=3, cooldown_s=2.0, max_cooldown_s=5.0, clock=clock)
    for _ in range(2):
        breaker.failure()
        breaker.check()  # still closed
    breaker.failure()
    with pytest.raises(ModelError) as info:
        breaker.check()
    assert info.value.outage and info.value.retryable
    assert info.value.retry_after == pytest.approx(2.0)
    assert "http://h/v1" in str(info.value)
    assert breaker.state().state == "open"

    clock.now += 2.0
    breaker.check()  # the one probe
    with pytest.raises(ModelError, match="circuit open"):
        breaker.check()  # others wait while the probe is out
    breaker.failure()  # the probe failed: open again, twice as long
    clock.now += 3.9
    with pytest.raises(ModelError):
        breaker.check()
    clock.now += 0.2
    breaker.check()
    breaker.success()
    assert breaker.closed and breaker.state().state == "closed"
    breaker.check()
    breaker.check()


def test_the_cooldown_is_capped() -> None:
    clock = Clock()
    breaker = CircuitBreaker("e", threshold=1, cooldown_s=1.0, max_cooldown_s=3.0, clock=clock)
    for _ in range(10):
        breaker.failure()
    with pytest.raises(ModelError) as info:
        breaker.check()
    assert info.value.retry_after is not None and info.value.retry_after <= 3.0


def test_breakers_are_shared_per_endpoint_and_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(breakers, "MAX_ENDPOINTS", 3)
    first = breakers.breaker_for("http://a/v1")
    assert breakers.breaker_for("http://a/v1") is first
    for _ in range(5):
        first.failure()  # open: kept over the closed ones
    for name in "bcdef":
        breakers.breaker_for(f"http://{name}/v1")
    states = breakers.breakers()
    assert len(states) == 3
    assert "http://a/v1" in [s.endpoint for s in states]
    assert breakers.breaker_for("x" * 10_000).endpoint == "x" * breakers.MAX_KEY


# --------------------------------------------------------------------------- through the adapter


async def test_5xx_open_the_breaker_and_then_calls_fail_fast_without_a_request(server: ScriptServer) -> None:
    server.script(*[Reply(status=502, chunks=[b"bad gateway"]) for _ in range(3)])
    model = make_model(server, max_retries=5)
    model.breaker.threshold = 3
    with pytest.raises(ModelError) as info:
        await run(model)
    assert info.value.outage and info.value.retryable
    assert len(server.received) == 3, "the fourth attempt met the open breaker"
    started = time.monotonic()
    with pytest.raises(ModelError, match="circuit open") as again:
        await run(make_model(server))
    assert time.monotonic() - started < 0.5 and again.value.outage
    assert len(server.received) == 3


async def test_retries_exhausted_on_5xx_are_an_outage(server: ScriptServer) -> None:
    server.script(Reply(status=503, chunks=[b"overloaded"]), Reply(status=500, chunks=[b"boom"]))
    with pytest.raises(ModelError, match=r"answered HTTP 500: boom") as info:
        await run(make_model(server, max_retries=1))
    assert info.value.outage


async def test_a_rate_limit_is_not_an_outage_and_closes_the_breaker(server: ScriptServer) -> None:
    server.script(
        Reply(status=500, chunks=[b"x"]), Reply(status=429, headers={"Retry-After": "0"}, chunks=[b"{}"])
    )
    model = make_model(server, max_retries=1)
    with pytest.raises(ModelError) as info:
        await run(model)
    assert not info.value.outage, "the server is up; it only asks for patience"
    assert model.breaker.closed and model.breaker.state().failures == 0


async def test_connection_refused_is_an_outage_naming_the_redacted_base_url() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://user:s3cret@127.0.0.1:{port}/v1?api-key=s3cret"
    model = OpenAIChatModel(model="m", base_url=url, max_retries=0)
    with pytest.raises(ModelError) as info:
        await run(model)
    assert info.value.outage
    assert f"cannot reach http://***@127.0.0.1:{port}/v1?api-key=***" in str(info.value)
    assert "s3cret" not in str(info.value) and "s3cret" not in repr(model)


async def test_a_404_names_the_url_and_the_model(server: ScriptServer) -> None:
    server.script(Reply(status=404, chunks=[b'{"error": {"message": "model not found"}}']))
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    message = str(info.value)
    assert f"{server.base_url}/chat/completions answered HTTP 404: model not found" in message
    assert "'test-model'" in message and not info.value.retryable and not info.value.outage


@pytest.mark.parametrize(
    "error",
    [
        {
            "message": "This model's maximum context length is 8192 tokens. "
            "However, you requested 9000 tokens."
        },
        {"message": "Input too long", "code": "context_length_exceeded"},
        {"message": "the request exceeds the available context size, try increasing it", "type": "exceed"},
    ],
)
async def test_a_context_overflow_is_its_own_kind(server: ScriptServer, error: dict[str, str]) -> None:
    server.script(Reply(status=400, chunks=[json.dumps({"error": error}).encode()]))
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    assert info.value.context_overflow and not info.value.retryable
    assert len(server.received) == 1


async def test_other_400s_are_plain_refusals(server: ScriptServer) -> None:
    server.script(Reply(status=400, chunks=[b'{"error": {"message": "expected a string, got null"}}']))
    with pytest.raises(ModelError) as info:
        await run(make_model(server))
    assert info.value.kind == "error" and not info.value.retryable


async def test_retries_are_logged_with_the_thread_id(
    server: ScriptServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Reply(status=500, chunks=[b"boom"]), text_reply("ok"))
    with caplog.at_level(logging.INFO, logger="dormant.models"):
        await run(make_model(server), make_request())
    (record,) = [r for r in caplog.records if r.name == "dormant.models"]
    assert "model_retry thread=t1" in record.getMessage() and "HTTP 500: boom" in record.getMessage()
    assert record.thread_id == "t1"  # type: ignore[attr-defined]


def test_redact() -> None:
    assert redact("https://api.example.com/v1") == "https://api.example.com/v1"
    assert redact("https://u:p@h:1/v1?key=abc&x=1") == "https://***@h:1/v1?key=***&x=***"
