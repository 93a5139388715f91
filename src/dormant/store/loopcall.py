"""A worker thread's way onto the event loop a store runs on.

:class:`~dormant.memory.core.MemoryCore` is synchronous and runs in a worker thread
(the embedder must stay off the event loop); a store's connections belong to the
loop that opened it. :func:`call_on_loop` runs one coroutine on that loop and blocks
the worker thread until it is done. Called on the loop's own thread it raises
instead of deadlocking.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from ..errors import StoreError, UsageError

T = TypeVar("T")


def call_on_loop(loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, T]) -> T:
    """The value of ``coro`` run on ``loop`` (its exception re-raised here).

    UsageError when called on ``loop``'s own thread; StoreError when the loop is closed
    (the store was closed).
    """
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise UsageError(
            "memory rows are reached from a worker thread (Memory runs MemoryCore with "
            "asyncio.to_thread), not from the store's event loop"
        )
    if loop.is_closed():
        coro.close()
        raise StoreError("the store is not open")
    return asyncio.run_coroutine_threadsafe(coro, loop).result()
