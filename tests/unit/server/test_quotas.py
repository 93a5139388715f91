"""Tenant quotas: a token bucket of admissions per second per tenant, bounded in tenants."""

from __future__ import annotations

import pytest

from dormant.errors import QuotaExceeded, http_status
from dormant.server.quotas import TenantQuotas


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_tenant_gets_its_burst_then_its_rate() -> None:
    clock = Clock()
    q = TenantQuotas(admissions_per_s=2.0, burst=3, clock=clock)
    for _ in range(3):
        q.take("a")
    with pytest.raises(QuotaExceeded) as refused:
        q.take("a")
    assert refused.value.retry_after == pytest.approx(0.5) and http_status(refused.value) == 429
    q.take("b")  # another tenant's bucket is its own
    clock.now += 0.5
    q.take("a")  # one token back after half a second at 2/s
    with pytest.raises(QuotaExceeded):
        q.take("a")
    clock.now += 10
    q.take("a", 3)  # refilled, but never over the burst
    with pytest.raises(QuotaExceeded):
        q.take("a")


def test_a_refused_admission_spends_nothing_and_zero_is_no_limit() -> None:
    clock = Clock()
    q = TenantQuotas(admissions_per_s=1.0, burst=2, clock=clock)
    with pytest.raises(QuotaExceeded):
        q.take("a", 3)
    q.take("a", 2)  # the refused three spent nothing
    unlimited = TenantQuotas(clock=clock)
    for _ in range(10_000):
        unlimited.take("a")


def test_buckets_are_bounded_in_tenants() -> None:
    clock = Clock()
    q = TenantQuotas(admissions_per_s=1.0, burst=1, max_tenants=3, clock=clock)
    for tenant in ("a", "b", "c", "d", "e"):
        q.take(tenant)
    assert len(q._buckets) == 3
    q.take("a")  # evicted first (least recently used): a full bucket again
    with pytest.raises(QuotaExceeded):
        q.take("e")  # still remembered: its bucket is empty
