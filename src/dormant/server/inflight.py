"""Identical OpenAI-compatible requests in flight share one wait, and stop waiting when
their client leaves.

A retried Chat Completions request admits nothing new (its inputs' dedup keys are the
hash of the conversation prefix), so the store already makes identical requests one
turn. :class:`Flights` makes them one *wait* too: the first request with a key starts
the exchange as a task of its own; every identical request (the same tenant, thread
and request fingerprint) awaits that task's outcome instead of following the thread
itself. The task does not belong to any one client: when the client that started it
disconnects, the others still get the answer, and the turn commits regardless.

Bounds: at most ``max_flights`` keys are shared at once (past it a request waits on its
own, which is as correct, only less cheap); each task lives at most the reply timeout
(the exchange's own), and its entry is removed the moment it ends. A finished outcome
is never kept here: a later retry reads the stored answer from the store.

:func:`until_disconnect` races a wait with the client's disconnect, so a handler whose
client has gone stops waiting at once (the turn still commits).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.requests import Request

T = TypeVar("T")

#: Keys shared at once by default.
DEFAULT_MAX_FLIGHTS = 4096


class ClientGone(Exception):
    """The client disconnected before the answer was ready (nothing to send it to)."""


class Flights:
    """A bounded map of shared in-flight exchanges: key -> the task computing its outcome."""

    def __init__(self, *, max_flights: int = DEFAULT_MAX_FLIGHTS) -> None:
        if max_flights < 0:
            raise ValueError("max_flights must be >= 0")
        self.max_flights = max_flights
        self._tasks: dict[tuple[str, ...], asyncio.Future[Any]] = {}
        #: requests that joined a flight another request started
        self.joined = 0

    def __len__(self) -> int:
        return len(self._tasks)

    async def run(self, key: tuple[str, ...], make: Callable[[], Awaitable[T]], request: Request) -> T:
        """The outcome of ``make()``, shared with every identical request in flight.

        Raises what ``make()`` raised (to every sharer), or :class:`ClientGone` when this
        request's client disconnected first (the shared task goes on for the others).
        """
        task = self._tasks.get(key)
        if task is not None:
            self.joined += 1
        else:
            task = asyncio.ensure_future(make())
            if len(self._tasks) < self.max_flights:
                self._tasks[key] = task
                task.add_done_callback(lambda done: self._forget(key, done))
        result: T = await until_disconnect(asyncio.shield(task), request)
        return result

    def _forget(self, key: tuple[str, ...], done: asyncio.Future[Any]) -> None:
        if self._tasks.get(key) is done:
            del self._tasks[key]
        if not done.cancelled():
            done.exception()  # retrieved: a failure nobody awaited any more is not logged as lost


async def until_disconnect(wait: Awaitable[T], request: Request) -> T:
    """``await wait``, unless the client disconnects first: then ClientGone (``wait`` is
    cancelled; shield it to keep it running)."""
    waiting = asyncio.ensure_future(wait)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        done, _ = await asyncio.wait({waiting, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
    if waiting in done:
        return waiting.result()
    waiting.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await waiting
    raise ClientGone("the client disconnected")


async def _disconnected(request: Request) -> None:
    """Return once the client has disconnected (the body was read already)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return
