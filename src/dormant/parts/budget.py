"""The bytes of images and files that model requests in flight hold: a process-wide budget.

A request to a model that sees images carries each image (and PDF) it shows as a base64
data URI, read from the blob store when the request is built
(:func:`~dormant.parts.render.resolve`). Slices are bounded in number, not in the bytes
their requests hold, so :class:`PartBudget` bounds those: a request reserves the
encoded size of the parts it will inline (:func:`encoded_size`: 4/3 of their bytes, what
the request body holds while it is sent) *before* it reads them, and gives them back when
the request is done (its reply streamed, an error, or a cancel).

When the budget is taken a request waits, in arrival order (one that came later never
passes one that waits, however small), without polling. A request larger than the whole
budget is let in alone, once nothing else holds any of it: it is never refused and never
waits forever. A request with no part to inline reserves nothing and never waits.

The wait is part of the model call, so it counts against the model timeout to the first
streamed piece (``model_timeout_s``); the thread's lease is renewed meanwhile like any
running slice's. :data:`SHARED` is the process's budget; a runtime sets its limit from
``Settings.part_bytes_in_flight`` (``DORMANT_PART_BYTES_IN_FLIGHT``).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

#: The default budget: 64 MiB of encoded parts in flight per process.
DEFAULT_BYTES = 64 * 1024 * 1024


def encoded_size(nbytes: int) -> int:
    """The length of ``nbytes`` bytes in base64."""
    return 4 * ((max(0, nbytes) + 2) // 3)


@dataclass(frozen=True)
class BudgetStats:
    """What a :class:`PartBudget` holds now and did since it was made."""

    limit: int
    held: int  # bytes reserved by requests in flight now
    peak: int  # most bytes reserved at once
    holders: int  # requests holding a reservation now
    waiting: int  # requests waiting now
    waits: int  # requests that had to wait
    waited_s: float  # seconds spent waiting, summed
    oversize: int  # requests larger than the whole budget, let in alone


class PartBudget:
    """A FIFO-fair byte budget for the parts requests in flight hold (see the module)."""

    def __init__(self, limit: int = DEFAULT_BYTES) -> None:
        if limit < 1:
            raise ValueError("a part budget must be >= 1 byte")
        self._limit = limit
        self.held = 0
        self.peak = 0
        self.holders = 0
        self.waits = 0
        self.waited_s = 0.0
        self.oversize = 0
        self._queue: deque[tuple[int, asyncio.Future[None]]] = deque()

    @property
    def limit(self) -> int:
        """The most bytes held at once (but one request larger than it, alone)."""
        return self._limit

    @limit.setter
    def limit(self, value: int) -> None:
        if value < 1:
            raise ValueError("a part budget must be >= 1 byte")
        self._limit = value
        self._wake()

    def stats(self) -> BudgetStats:
        """The figures now."""
        return BudgetStats(
            self._limit,
            self.held,
            self.peak,
            self.holders,
            len(self._queue),
            self.waits,
            round(self.waited_s, 6),
            self.oversize,
        )

    def _fits(self, nbytes: int) -> bool:
        return self.held == 0 or self.held + nbytes <= self._limit

    def _take(self, nbytes: int) -> None:
        if nbytes > self._limit:
            self.oversize += 1
        self.held += nbytes
        self.holders += 1
        self.peak = max(self.peak, self.held)

    def _wake(self) -> None:
        """Grant the waiters at the head of the queue while they fit."""
        while self._queue:
            nbytes, future = self._queue[0]
            if future.done():  # cancelled while queued
                self._queue.popleft()
                continue
            if not self._fits(nbytes):
                return
            self._queue.popleft()
            self._take(nbytes)
            future.set_result(None)

    async def acquire(self, nbytes: int) -> None:
        """Reserve ``nbytes``, waiting (first come, first served) until they fit."""
        if nbytes <= 0:
            self.holders += 1
            return
        if not self._queue and self._fits(nbytes):
            self._take(nbytes)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append((nbytes, future))
        self.waits += 1
        started = time.perf_counter()
        try:
            await future
        except BaseException:
            if future.done() and not future.cancelled():  # granted, then cancelled: give back
                self.release(nbytes)
            else:
                future.cancel()
                self._wake()  # the head may have been this one: the next may fit now
            raise
        finally:
            self.waited_s += time.perf_counter() - started

    def release(self, nbytes: int) -> None:
        """Give back a reservation of ``nbytes`` made by :meth:`acquire`."""
        self.holders -= 1
        if nbytes > 0:
            self.held -= nbytes
            self._wake()

    @asynccontextmanager
    async def hold(self, nbytes: int) -> AsyncIterator[None]:
        """Reserve ``nbytes`` for the block; given back however it ends."""
        await self.acquire(nbytes)
        try:
            yield
        finally:
            self.release(nbytes)


#: The process's budget (its limit set by the runtime from its settings).
SHARED = PartBudget()
