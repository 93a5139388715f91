"""Quotas per tenant: threads, and admissions per second.

* **Admissions per second**: a token bucket per tenant (``rate`` per second, ``burst``
  at once) in this process; an admission over it is refused with 429 and the
  ``Retry-After`` that the bucket needs to refill. The buckets are bounded by entries
  (``max_tenants``, least recently used first out; an evicted tenant starts again
  with a full bucket). With several ``serve`` processes each one applies the rate.
* **Threads**: a client may not create a thread while its tenant already has
  ``max_threads`` (its threads' children included, counted by the store's ``tenant``
  column). Checked before the admission that would create the thread; two requests
  racing for the last slot can both pass, so the quota is exact only per request.

0 turns a quota off.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from ..errors import NotFound, QuotaExceeded
from ..runtime import Runtime


class TenantQuotas:
    """The quotas of every tenant of one server process."""

    def __init__(
        self,
        *,
        admissions_per_s: float = 0.0,
        burst: int = 0,
        max_threads: int = 0,
        max_tenants: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate = admissions_per_s
        self.burst = float(burst or max(1, round(admissions_per_s)))
        self.max_threads = max_threads
        self.max_tenants = max_tenants
        self.clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tenant -> (tokens, at)

    def take(self, tenant: str, count: int = 1) -> None:
        """Spend ``count`` admissions of ``tenant``; QuotaExceeded (nothing spent) when over."""
        if self.rate <= 0 or count <= 0:
            return
        now = self.clock()
        tokens, at = self._buckets.pop(tenant, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < count:
            self._remember(tenant, tokens, now)
            wait = (count - tokens) / self.rate
            raise QuotaExceeded(f"over {self.rate:g} admissions per second for this tenant", retry_after=wait)
        self._remember(tenant, tokens - count, now)

    def _remember(self, tenant: str, tokens: float, now: float) -> None:
        self._buckets[tenant] = (tokens, now)
        while len(self._buckets) > self.max_tenants:
            self._buckets.popitem(last=False)

    async def check_new_thread(self, runtime: Runtime, thread_id: str, tenant: str) -> None:
        """QuotaExceeded if stored thread ``thread_id`` does not exist yet and ``tenant``
        (its tenant) already has ``max_threads`` threads."""
        if self.max_threads <= 0:
            return
        try:
            await runtime.thread(thread_id, tenant=tenant)
            return  # not a new thread
        except NotFound:
            pass
        status = await runtime.status(tenant)
        threads = sum(status.threads_by_status.values())
        if threads >= self.max_threads:
            raise QuotaExceeded(
                f"this tenant has {threads} threads (quota {self.max_threads})", retry_after=60
            )

    async def admit(self, runtime: Runtime, thread_id: str, tenant: str, count: int = 1) -> None:
        """Both checks for ``count`` admissions to stored thread ``thread_id`` of ``tenant``."""
        await self.check_new_thread(runtime, thread_id, tenant)
        self.take(tenant, count)
