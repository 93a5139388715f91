"""Memory's way onto the SQLite store's connections: jobs handed to the store's event loop.

:class:`~dormant.memory.core.MemoryCore` is synchronous and runs in a worker thread
(the embedder must stay off the event loop); the store's writer and reader belong
to the loop that opened the store. :class:`StoreRows` submits each job to that
loop (:func:`~dormant.store.loopcall.call_on_loop`) and blocks the worker thread
until it ran. A file store's reads skip the loop: they run in the worker thread
itself, on a connection of memory's :class:`~dormant.store.sqlite.memory.readers.ReaderPool`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import apsw

from ...loopcall import call_on_loop
from ..connect import translate
from .readers import ReaderPool

T = TypeVar("T")
#: apsw.Connection (untyped rows)
Conn = Any


class StoreRows:
    """Runs memory jobs on the store's connections, on the store's event loop.

    ``submit(job, size)`` is the store writer's queue (one group-committed
    transaction per batch; the job's value once committed); ``reader()`` the
    store's read connection, used when there is no ``pool`` (``memory://``).
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        submit: Callable[[Callable[[Conn], Any], int], Awaitable[Any]],
        reader: Callable[[], Conn],
        pool: ReaderPool | None = None,
    ) -> None:
        self._loop = loop
        self._submit = submit
        self._reader = reader
        self._pool = pool

    def write(self, job: Callable[[Conn], T], size: int = 1024) -> T:
        """``job`` in a store write transaction; its value once committed."""

        async def run() -> T:
            value: T = await self._submit(job, size)
            return value

        return self._call(run())

    def read(self, job: Callable[[Conn], T]) -> T:
        """``job`` on a read connection: the pool's, in this thread, else the store's
        reader, on its loop."""
        if self._pool is not None:
            return self._pool.run(job)

        async def run() -> T:
            try:
                return job(self._reader())
            except apsw.Error as exc:
                raise translate(exc) from exc

        return self._call(run())

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return call_on_loop(self._loop, coro)
