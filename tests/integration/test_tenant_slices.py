"""A runtime with ``tenant_slices``: no tenant runs more slices at once than its cap, and
another tenant's work runs beside a flood."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

from dormant import Agent, Runtime, ScriptedModel
from dormant.models.base import ModelEvent, ModelRequest
from dormant.models.scripted import echo_script
from dormant.records import Priority
from dormant.tenants.scope import tenant_of
from tests.integration.conftest import fast_settings

A = "t00000000000a"
B = "t00000000000b"


class Gauge(ScriptedModel):
    """An echo model that takes a while and counts the slices of each tenant running at once."""

    def __init__(self) -> None:
        super().__init__(echo_script)
        self.running: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()
        self.order: list[str] = []

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        tenant = tenant_of(request.thread_id)
        self.order.append(request.thread_id)
        self.running[tenant] += 1
        self.peak[tenant] = max(self.peak[tenant], self.running[tenant])
        try:
            await asyncio.sleep(0.05)
        finally:
            self.running[tenant] -= 1
        async for event in super().stream(request):
            yield event


async def test_no_tenant_runs_more_slices_than_its_cap(store_url: str) -> None:
    gauge = Gauge()
    settings = fast_settings(concurrency=8, tenant_slices=2)
    async with Runtime(store_url, [Agent(name="a", model=gauge)], settings=settings) as rt:
        for n in range(8):
            await rt.send(f"{A}/bulk-{n}", "flood", priority=Priority.P2)
        await rt.send(f"{B}/urgent", "help", priority=Priority.P0)
        await rt.run_until_idle(timeout=30)
    assert gauge.peak[A] == 2  # the cap was reached, never passed, with 6 slots left free
    assert gauge.peak[B] == 1
    assert f"{B}/urgent" in gauge.order[:3]  # b's thread ran in the first round, beside a's
    assert len(gauge.order) == 9
