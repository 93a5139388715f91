"""A store for synchronous callers of :class:`~dormant.memory.core.MemoryCore` (the CLI,
the benchmarks): its event loop runs in a thread of its own.

A store's writer and connections belong to the event loop that opened it; memory's
rows hand their jobs to that loop (:class:`~dormant.store.sqlite.memory.rows.StoreRows`).
Code without a loop of its own runs the store here and calls the core directly.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from ..store.base import Store

R = TypeVar("R")
#: how long a synchronous caller waits for the store to open or close
STORE_TIMEOUT_S = 120.0


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` waits for a coroutine on it."""

    def __init__(self, name: str = "dormant-store-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, R], timeout: float = STORE_TIMEOUT_S) -> R:
        """The value of ``coro``, run on the loop (its exception re-raised here)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=timeout)

    def stop(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()


@contextmanager
def blocking_store(store: Store) -> Iterator[Store]:
    """``store`` opened on a loop thread of its own, closed (then the loop stopped) on exit."""
    with blocking(store) as (opened, _):
        yield opened


@contextmanager
def blocking(store: Store) -> Iterator[tuple[Store, LoopThread]]:
    """``store`` opened on a loop thread of its own, and that loop (to run more of the
    store's coroutines on); the store closed, then the loop stopped, on exit."""
    loops = LoopThread()
    try:
        loops.run(store.open())
        try:
            yield store, loops
        finally:
            loops.run(store.close())
    finally:
        loops.stop()
