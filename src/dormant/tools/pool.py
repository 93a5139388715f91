"""The bounded pool of OS threads that synchronous tools run in.

A sync tool cannot be stopped once it runs: a timeout only stops *waiting* for it,
and its thread goes on until the function returns. So such calls get a pool of
their own, apart from the event loop's default executor (which the stores and
``asyncio.to_thread`` users need): at most ``size`` threads, however many calls
hang. When every thread is taken, a new call waits in line, within its tool's
timeout; one that times out still in line never ran (:attr:`SyncCall.started`
says so), one that timed out while running has an unknown outcome.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

#: Threads of the pool used when none is given (a runtime makes its own, sized by settings).
DEFAULT_SIZE = 32


class SyncCall:
    """One sync function call's progress, as the event loop can see it."""

    __slots__ = ("finished", "started")

    def __init__(self) -> None:
        self.started = False  # a pool thread began running it
        self.finished = False  # it returned or raised

    @property
    def running(self) -> bool:
        """Started and not finished: a thread is still in it (its effects may still happen)."""
        return self.started and not self.finished


class ToolThreads:
    """At most ``size`` threads for sync tools; calls past that wait in line."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        if size < 1:
            raise ValueError("a tool thread pool needs at least one thread")
        self.size = size
        self._executor: ThreadPoolExecutor | None = None  # made on first use, again after close()
        self._lock = threading.Lock()
        self._busy = 0

    @property
    def busy(self) -> int:
        """Threads running a call now (including calls whose caller gave up waiting)."""
        return self._busy

    async def call(
        self, fn: Callable[..., Any], kwargs: dict[str, Any], progress: SyncCall | None = None
    ) -> Any:
        """Run ``fn(**kwargs)`` in a pool thread (with the caller's context variables).

        Cancelling the caller (a timeout) drops a call still in line; a running one
        goes on in its thread, and ``progress`` tells the two apart.
        """
        progress = progress or SyncCall()
        context = contextvars.copy_context()
        job = functools.partial(self._run, progress, context, fn, kwargs)
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.size, thread_name_prefix="dormant-tool")
        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    def _run(
        self, progress: SyncCall, context: contextvars.Context, fn: Callable[..., Any], kwargs: dict[str, Any]
    ) -> Any:
        with self._lock:
            self._busy += 1
        progress.started = True
        try:
            return context.run(fn, **kwargs)
        finally:
            progress.finished = True
            with self._lock:
                self._busy -= 1

    def close(self) -> None:
        """Drop calls still in line; threads still in a call end when it returns (not waited
        for). A later call starts a new set of threads."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None


_default: ToolThreads | None = None


def default_pool() -> ToolThreads:
    """The process-wide pool for tool calls made without a runtime (created on first use)."""
    global _default
    if _default is None:
        _default = ToolThreads(DEFAULT_SIZE)
    return _default
