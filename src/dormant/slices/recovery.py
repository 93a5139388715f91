"""Recovery that follows the model server: wake the threads waiting on an endpoint the
moment it answers again.

A thread whose model endpoint is down waits on its row (``wait_reason``,
``wait_until``: :meth:`dormant.slices.runner.SliceRunner._model_outage`). Two things end
that wait early, before its timer:

* the endpoint's circuit breaker closes (a call or a health check got through): the
  breaker's listener makes every thread waiting on that endpoint claimable now
  (:meth:`dormant.store.base.Store.wake_waiting`) and wakes the scheduler;
* while a breaker is open, :class:`EndpointWatch` checks every ``interval_s`` whether
  the server's port takes connections (``model.reachable()``, no HTTP request). Once a
  check, or the breaker's last failure, has found it closed (the server is gone, not
  just failing), it asks the server
  whether it is back (``model.healthy()``, a cheap ``GET /models``) at each check until
  it is; a healthy answer closes the breaker, which wakes the threads as above. A
  server that answers with errors all along is left to the breaker's own probes.

Bounded: one listener and at most one wake in flight per endpoint the runtime's agents
use; one health check per open endpoint per interval.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol, cast

from ..agent import Agent
from ..models.breaker import CircuitBreaker
from ..store.base import Store

__all__ = ["EndpointWatch"]

log = logging.getLogger("dormant.runtime")


class _Checkable(Protocol):
    def reachable(self) -> Awaitable[bool]: ...

    def healthy(self) -> Awaitable[bool]: ...


class EndpointWatch:
    """The breakers of a runtime's models, listened to and checked while open."""

    def __init__(
        self,
        store: Store,
        agents: Mapping[str, Agent] | Iterable[Agent],
        wake: Callable[[], None],
        interval_s: float = 1.0,
    ) -> None:
        self.store = store
        self.wake = wake
        self.interval_s = interval_s
        #: endpoint -> (its breaker, the model that can check it, or None)
        self.endpoints: dict[str, tuple[CircuitBreaker, _Checkable | None]] = {}
        for agent in agents.values() if isinstance(agents, Mapping) else agents:
            breaker = getattr(agent.model, "breaker", None)
            if isinstance(breaker, CircuitBreaker) and breaker.endpoint not in self.endpoints:
                model = agent.model
                checks = all(callable(getattr(model, name, None)) for name in ("healthy", "reachable"))
                self.endpoints[breaker.endpoint] = (breaker, cast(_Checkable, model) if checks else None)
        #: endpoints found unreachable since their breaker opened
        self.gone: set[str] = set()
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
                for endpoint, (breaker, model) in self.endpoints.items():
                    if model is not None:
                        await self._check(endpoint, breaker, model)
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

    async def _check(self, endpoint: str, breaker: CircuitBreaker, model: _Checkable) -> None:
        """One check of an endpoint (see the module docstring)."""
        if breaker.closed:
            self.gone.discard(endpoint)
            return
        if endpoint not in self.gone and not breaker.unreachable:
            if not await model.reachable():
                self.gone.add(endpoint)
            return
        if await model.reachable() and await model.healthy():
            self.gone.discard(endpoint)
            log.info("model_endpoint_back", extra={"endpoint": endpoint})
            breaker.success()  # its listener wakes the waiting threads

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
