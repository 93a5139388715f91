"""Circuit breakers per model endpoint, shared by the process.

When a model server is down, every thread with pending input would otherwise hammer
it (attempts x slices) and then be marked failed. A breaker counts consecutive
outage failures of one endpoint (transport errors, 5xx); past ``threshold`` it
opens for a cool-down that doubles while the endpoint keeps failing (capped). While
it is open, calls fail fast with ``ModelError(kind="outage", retry_after=...)``,
which the runtime treats as "wait", not as the thread's failure. After the
cool-down one probe call goes through (half-open); its success closes the breaker.

When a breaker closes after it had opened, its listeners (:meth:`CircuitBreaker.listen`)
hear the endpoint's name: the runtime makes the threads waiting on it ready at once
(:meth:`dormant.store.base.Store.wake_waiting`), so recovery follows the server, not
a timer. While a breaker is open the runtime also asks the server cheaply whether it
is back (:meth:`dormant.models.openai.OpenAIChatModel.healthy`), and a healthy answer
closes it.

Bounded: at most :data:`MAX_ENDPOINTS` breakers, each a few numbers, its endpoint
name (at most :data:`MAX_KEY` characters) and at most :data:`MAX_LISTENERS`
listeners; closed ones are forgotten first.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ModelError

__all__ = ["BreakerState", "CircuitBreaker", "breaker_for", "breakers"]

log = logging.getLogger("dormant.models")

#: Endpoints with a breaker at once (the least recently used closed one is dropped).
MAX_ENDPOINTS = 256
#: Longest endpoint key kept (longer ones are cut).
MAX_KEY = 512
#: Listeners of one breaker (runtimes in this process using its endpoint).
MAX_LISTENERS = 64


@dataclass(frozen=True, slots=True)
class BreakerState:
    """A breaker as ``dormant status`` shows it."""

    endpoint: str
    state: str  # "closed" | "open" | "half_open"
    failures: int
    retry_in_s: float


class CircuitBreaker:
    """The breaker of one endpoint. Thread-safe (worker threads may share a model)."""

    def __init__(
        self,
        endpoint: str,
        *,
        threshold: int = 5,
        cooldown_s: float = 2.0,
        max_cooldown_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if threshold < 1 or cooldown_s <= 0 or max_cooldown_s < cooldown_s:
            raise ValueError("need threshold >= 1 and 0 < cooldown_s <= max_cooldown_s")
        self.endpoint = endpoint
        self.threshold = threshold
        self.cooldown_s = cooldown_s
        self.max_cooldown_s = max_cooldown_s
        self.clock = clock
        self._lock = threading.Lock()
        self._failures = 0  # consecutive outage failures
        self._opens = 0  # times opened in a row (the cool-down doubles with each)
        self._open_until = 0.0  # while now < this, calls fail fast
        self._probing_until = 0.0  # a half-open probe is out until then
        self._listeners: list[Callable[[str], None]] = []
        self._unreachable = False  # the last failure: no connection at all

    def listen(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(endpoint)`` each time the breaker closes after it had opened
        (from the thread that closed it); returns the function that stops it. Raises
        :class:`ValueError` past :data:`MAX_LISTENERS`."""
        with self._lock:
            if len(self._listeners) >= MAX_LISTENERS:
                raise ValueError(f"breaker of {self.endpoint} has {MAX_LISTENERS} listeners already")
            self._listeners.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return stop

    def check(self) -> None:
        """Let a call through, or raise ``ModelError(kind="outage")`` while open.

        After the cool-down one caller at a time is let through as a probe.
        """
        with self._lock:
            now = self.clock()
            if self._failures < self.threshold:
                return
            wait = self._open_until - now
            if wait <= 0 and now >= self._probing_until:
                self._probing_until = now + self._cooldown()  # a lost probe frees the slot
                return
            wait = max(wait, self._probing_until - now, 0.0)
        raise ModelError(
            f"model endpoint {self.endpoint} is failing ({self._failures} failures in a row); "
            f"circuit open, retry in {wait:.1f}s",
            retryable=True,
            retry_after=wait,
            kind="outage",
        )

    def success(self) -> None:
        """The endpoint answered: close the breaker (and tell the listeners if it was open)."""
        with self._lock:
            reopened = self._failures >= self.threshold
            self._unreachable = False
            self._failures = 0
            self._opens = 0
            self._open_until = self._probing_until = 0.0
            listeners = list(self._listeners) if reopened else []
        for listener in listeners:
            try:
                listener(self.endpoint)
            except Exception:  # a listener's failure is not the caller's
                log.exception("breaker_listener_failed", extra={"endpoint": self.endpoint})

    def failure(self, *, unreachable: bool = False) -> None:
        """The endpoint failed (transport error or 5xx): count it, open past the threshold.
        ``unreachable``: it could not be reached at all (not an error answer)."""
        with self._lock:
            self._unreachable = unreachable
            self._failures += 1
            if self._failures >= self.threshold:
                now = self.clock()
                self._open_until = now + self._cooldown()
                self._opens += 1
                self._probing_until = 0.0

    def _cooldown(self) -> float:
        return min(self.cooldown_s * (2.0 ** min(self._opens, 30)), self.max_cooldown_s)

    @property
    def unreachable(self) -> bool:
        """Whether the last failure was no connection at all (the server is gone)."""
        return self._unreachable

    @property
    def closed(self) -> bool:
        """Whether calls go through unhindered."""
        return self._failures < self.threshold

    def state(self) -> BreakerState:
        """A snapshot for status output."""
        with self._lock:
            now = self.clock()
            if self._failures < self.threshold:
                name, wait = "closed", 0.0
            elif now < self._open_until:
                name, wait = "open", self._open_until - now
            else:
                name, wait = "half_open", 0.0
            return BreakerState(endpoint=self.endpoint, state=name, failures=self._failures, retry_in_s=wait)


_lock = threading.Lock()
_breakers: OrderedDict[str, CircuitBreaker] = OrderedDict()


def breaker_for(endpoint: str, **options: float | int) -> CircuitBreaker:
    """The process-wide breaker of ``endpoint`` (created with ``options`` on first use).

    Bounded by :data:`MAX_ENDPOINTS`: past it, the least recently used closed breaker is
    dropped (an open one only if every breaker is open).
    """
    key = endpoint[:MAX_KEY]
    with _lock:
        breaker = _breakers.get(key)
        if breaker is not None:
            _breakers.move_to_end(key)
            return breaker
        if len(_breakers) >= MAX_ENDPOINTS:
            victim = next((k for k, b in _breakers.items() if b.closed), next(iter(_breakers)))
            del _breakers[victim]
        breaker = _breakers[key] = CircuitBreaker(key, **options)  # type: ignore[arg-type]
        return breaker


def breakers() -> list[BreakerState]:
    """The state of every endpoint breaker in this process (at most :data:`MAX_ENDPOINTS`)."""
    with _lock:
        current = list(_breakers.values())
    return [breaker.state() for breaker in current]


def reset() -> None:
    """Forget every breaker (for tests)."""
    with _lock:
        _breakers.clear()
