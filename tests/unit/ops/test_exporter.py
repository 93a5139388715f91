"""The Prometheus exporter: totals kept elsewhere are mirrored once, histograms fed by events."""

from __future__ import annotations

import asyncio
import time

from dormant import Agent, Runtime
from dormant.config import Settings
from dormant.models import ModelReply, ScriptedModel, Usage, echo_model
from dormant.ops.exporter import Exporter, render


def sample(body: str, name: str) -> float:
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} missing")


async def test_refresh_mirrors_totals_without_counting_twice() -> None:
    settings = Settings.build(store="memory://", rss_limit="4G", poll_s=0.01)
    async with Runtime("memory://", [Agent(name="a", model=echo_model())], settings=settings) as rt:
        exporter = Exporter(rt, status_ttl_s=0)
        await rt.send("t", "hi", key="k")
        await rt.run_until_idle(timeout=10)
        first, ctype = await render(exporter)
        second, _ = await render(exporter)
        assert ctype.startswith("text/plain")
        for body in (first.decode(), second.decode()):
            assert sample(body, "dormant_slices_total") == 1
            assert sample(body, "dormant_slice_seconds_count") == 1
            assert sample(body, "dormant_model_seconds_count") == 1
            assert sample(body, "dormant_memory_hard_limit_bytes") == 4 * 1024**3
            assert sample(body, 'dormant_backlog_inputs{priority="P1"}') == 0
        rt.stats.slices += 2
        third, _ = await render(exporter)
        assert sample(third.decode(), "dormant_slices_total") == 3


async def test_model_tokens_cut_replies_and_waits_are_exported() -> None:
    """The usage the model servers report, per process (counters) and over the
    store's threads (gauges); replies cut by the output cap; threads waiting on a model."""
    said = ModelReply(text="part", finish_reason="length", usage=Usage(prompt=100, completion=20, cached=64))
    model = ScriptedModel(lambda request: said)
    settings = Settings.build(store="memory://", rss_limit="4G", poll_s=0.01)
    async with Runtime("memory://", [Agent(name="a", model=model)], settings=settings) as rt:
        exporter = Exporter(rt, status_ttl_s=0)
        for n in range(2):
            await rt.send("t", "hi", key=f"k{n}")
            await rt.run_until_idle(timeout=10)
        await rt.send("t2", "hi", key="k")
        (waiting,) = await rt.store.claim_threads("probe", 1, 30.0)
        await rt.store.release(waiting, retry_at=time.time() + 60, wait="model endpoint down")
        body = (await render(exporter))[0].decode()
    assert sample(body, 'dormant_model_tokens_total{kind="prompt"}') == 200
    assert sample(body, 'dormant_model_tokens_total{kind="completion"}') == 40
    assert sample(body, 'dormant_model_tokens_total{kind="cached"}') == 128
    assert sample(body, 'dormant_stored_model_tokens{kind="prompt"}') == 200
    assert sample(body, "dormant_replies_cut_total") == 2
    assert sample(body, "dormant_continuations_total") == 0
    assert sample(body, "dormant_threads_waiting_model") == 1


async def test_retention_checkpoint_and_backlog_figures_are_exported() -> None:
    settings = Settings.build(store="memory://", rss_limit="4G", poll_s=0.01)
    async with Runtime("memory://", [Agent(name="a", model=echo_model())], settings=settings) as rt:
        exporter = Exporter(rt, status_ttl_s=0, retention_ttl_s=0)
        await rt.send("t", "hi", key="k")
        await asyncio.sleep(0.05)
        body = (await render(exporter))[0].decode()
        assert sample(body, "dormant_oldest_ready_input_age_seconds") >= 0.05, "the input waits"
        assert sample(body, "dormant_checkpoint_age_seconds") == -1, "no checkpoint yet"
        await rt.run_until_idle(timeout=10)
        await rt.store.journal.checkpoint("t", "full")
        body = (await render(exporter))[0].decode()
        assert sample(body, "dormant_oldest_ready_input_age_seconds") == 0
        assert sample(body, 'dormant_retention_tier_bytes{tier="history"}') >= len("hi")
        assert sample(body, 'dormant_retention_tier_bytes{tier="dedup_keys"}') > 0
        assert sample(body, "dormant_checkpoint_age_seconds") >= 0
        assert sample(body, "dormant_checkpoint_bytes") == 2, "an empty state: {}"
        assert 0 <= sample(body, "dormant_recovery_seconds_estimate") < 1
