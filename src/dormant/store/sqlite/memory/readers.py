"""Read connections of memory's own, used by the worker threads that run recall.

:class:`~dormant.memory.core.MemoryCore` runs in a worker thread. Handing each of its
reads to the store's event loop (:class:`~dormant.store.sqlite.memory.link.StoreRows`)
costs a round trip through a loop that is busy running slices: in a slice, the
recall's two reads and the profile listing's two cost ~1.8 ms of hops and waiting
(measured: the recall step went from 4.5 to 2.6 ms p50 without them, at 100k
records). A file
store therefore gives memory a small pool of read-only connections to the same
file: a worker thread checks one out, runs its read on it, and gives it back, with
no hop. WAL lets them read while the store's writer commits; each read sees what
was committed before it started, as the store's own reader does.

Bounded: at most ``size`` connections (each with the store reader's page cache), a
thread that finds them all busy waits for one. ``memory://`` has no pool (its
database is private to one connection): its reads keep going through the loop.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

import apsw

from ....errors import StoreError
from ..connect import translate

T = TypeVar("T")
#: apsw.Connection (untyped rows)
Conn = Any
#: connections in the pool: recall and the profile listing of a slice run at once,
#: and a runtime runs a few slices at a time (asyncio's worker threads: cores + 4)
POOL_SIZE = 4
#: how long a read waits for a free connection before it fails
WAIT_S = 30.0


class ReaderPool:
    """At most ``size`` read connections made by ``connect``, one per running read."""

    def __init__(self, connect: Callable[[], Conn], size: int = POOL_SIZE) -> None:
        if size < 1:
            raise ValueError("a reader pool needs at least one connection")
        self._connect = connect
        self._free: list[Conn] = []
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._open = 0
        self._closed = False

    @property
    def connections(self) -> int:
        """Connections open now (free or in use)."""
        return self._open

    def run(self, job: Callable[[Conn], T]) -> T:
        """``job`` on a connection of the pool, in the calling thread (driver errors
        translated); StoreError once the pool is closed."""
        if not self._slots.acquire(timeout=WAIT_S):
            raise StoreError(f"no free memory read connection within {WAIT_S:g} s")
        try:
            conn = self._take()
            try:
                return job(conn)
            except apsw.Error as exc:
                raise translate(exc) from exc
            finally:
                self._give(conn)
        finally:
            self._slots.release()

    def _take(self) -> Conn:
        with self._lock:
            if self._closed:
                raise StoreError("the store is not open")
            if self._free:
                return self._free.pop()
            self._open += 1
        try:
            return self._connect()
        except BaseException:
            with self._lock:
                self._open -= 1
            raise

    def _give(self, conn: Conn) -> None:
        with self._lock:
            if not self._closed:
                self._free.append(conn)
                return
            self._open -= 1
        conn.close()  # the pool closed while this read ran

    def close(self) -> None:
        """Close the free connections now; one in use closes when its read ends."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
            self._open -= len(free)
        for conn in free:
            conn.close()
