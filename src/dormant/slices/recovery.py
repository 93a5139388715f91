"""Recovery that follows the model server: wake the threads waiting on an endpoint the
moment it answers again.

A thread whose model endpoint is down waits on its row (``wait_reason``,
``wait_until``: :meth:`dormant.slices.runner.SliceRunner._model_outage`). Two things end
that wait early, before its timer:

* the endpoint's circuit breaker closes (a call or a health check got through): the
  breaker's listener makes every thread waiting on that endpoint claimable now
  (:meth:`dormant.store.base.Store.wake_waiting`) and wakes the scheduler;
* while a breaker is open, :class:`EndpointWatch` asks the server every
  ``interval_s`` whether it is back (``model.healthy()``, a cheap ``GET /models``);
  a healthy answer closes the breaker, which wakes the threads as above.

Bounded: one listener and at most one wake in flight per endpoint the runtime's agents
use; one health check per open endpoint per interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from ..agent import Agent
from ..models.breaker import CircuitBreaker
from ..store.base import Store

__all__ = ["EndpointWatch"]

log = logging.getLogger("dormant.runtime")


class _Checkable(Protocol):
    def healthy(self) -> Awaitable[bool]: ...


class EndpointWatch:
    """The breakers of a runtime's models, listened to and checked while open."""

    def __init__(
        self, store: Store, agents: Iterable[Agent], wake: Callable[[], None], *, interval_s: float = 1.0
    ) -> None:
        self.store = store
        self.wake = wake
        self.interval_s = interval_s
        #: endpoint -> (its breaker, a model that can check its health or None)
        self.endpoints: dict[str, tuple[CircuitBreaker, Callable[[], Awaitable[bool]] | None]] = {}
        for agent in agents:
            breaker = getattr(agent.model, "breaker", None)
            if isinstance(breaker, CircuitBreaker) and breaker.endpoint not in self.endpoints:
                check = getattr(agent.model, "healthy", None)
                self.endpoints[breaker.endpoint] = (breaker, check if callable(check) else None)
        self._waking: dict[str, asyncio.Task[None]] = {}
        self.woken = 0  # threads woken so far

    async def run(self, stop: asyncio.Event) -> None:
        """Listen to the breakers and check open ones until ``stop`` is set."""
        if not self.endpoints:
            await stop.wait()
            return
        loop = asyncio.get_running_loop()

        def closed(endpoint: str) -> None:  # any thread: hop to the loop
            loop.call_soon_threadsafe(self._closed, endpoint)

        stops = [breaker.listen(closed) for breaker, _ in self.endpoints.values()]
        try:
            while not stop.is_set():
                for breaker, check in self.endpoints.values():
                    if check is not None and not breaker.closed and await check():
                        log.info("model_endpoint_back", extra={"endpoint": breaker.endpoint})
                        breaker.success()  # its listener wakes the waiting threads
                try:
                    async with asyncio.timeout(self.interval_s):
                        await stop.wait()
                except TimeoutError:
                    pass
        finally:
            for unlisten in stops:
                unlisten()
            for task in list(self._waking.values()):
                task.cancel()
            await asyncio.gather(*self._waking.values(), return_exceptions=True)

    def _closed(self, endpoint: str) -> None:
        """The breaker of ``endpoint`` closed: wake its waiting threads (one wake at a time)."""
        running = self._waking.get(endpoint)
        if running is not None and not running.done():
            return
        self._waking[endpoint] = asyncio.get_running_loop().create_task(self._wake(endpoint))

    async def _wake(self, endpoint: str) -> None:
        try:
            count = await self.store.wake_waiting(endpoint)
        except Exception as exc:  # the timers still end the waits
            log.warning(
                "model_wake_failed", extra={"endpoint": endpoint, "error": f"{type(exc).__name__}: {exc}"}
            )
            return
        self.woken += count
        if count:
            log.info("model_waits_woken", extra={"endpoint": endpoint, "threads": count})
        self.wake()
