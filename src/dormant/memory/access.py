"""Access counting off recall's path: counts gathered in memory, written in batches by
a thread of their own.

Recall counts each record it returns (``access_count``, ``last_access_at``: what
"decay from the last access" reads). Counting is a write; a recall that waited for
it paid a group commit every ``batch`` records (measured: a flush of 256 counts took
7-70 ms in a slice, on the recall that filled the batch). :class:`AccessCounts`
keeps the counts (bounded) and hands a full batch to one background writer thread;
the recall returns at once.

Honest about losses: a count is written or dropped, never reported written when it
was not. A failed batch is logged (``memory_touch_failed``) and counted in
:attr:`AccessCounts.dropped`; so is a batch that finds :data:`MAX_PENDING_BATCHES`
already waiting (a store that cannot keep up). :meth:`AccessCounts.flush` (on
close) waits for the writer and writes the rest in the caller's thread, raising
what fails there.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger("dormant.memory")

#: one write per tenant: ``(record id, access time)`` pairs
Write = Callable[[str, Sequence[tuple[str, float]]], None]
#: full batches waiting for (or being written by) the writer thread, at most
MAX_PENDING_BATCHES = 4


class AccessCounts:
    """Accesses of records, written by ``write`` once ``batch`` of them are pending."""

    def __init__(self, write: Write, batch: int) -> None:
        self._write = write
        self._batch = max(1, batch)
        self._lock = threading.Lock()
        self._pending: dict[str, list[tuple[str, float]]] = {}
        self._count = 0
        self._executor: ThreadPoolExecutor | None = None
        self._inflight: list[Future[None]] = []
        #: accesses that were not written (a failed or refused batch)
        self.dropped = 0

    def add(self, tenant: str, ids: Sequence[str], at: float) -> None:
        """Count one access of each of ``ids``; a full batch goes to the writer thread."""
        with self._lock:
            self._pending.setdefault(tenant, []).extend((i, at) for i in ids)
            self._count += len(ids)
            if self._count < self._batch:
                return
            batch, self._pending, self._count = self._pending, {}, 0
            self._inflight = [f for f in self._inflight if not f.done()]
            if len(self._inflight) >= MAX_PENDING_BATCHES:
                self._lost(batch, "the store is behind: batches are still waiting")
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dormant-touch")
            self._inflight.append(self._executor.submit(self._write_batch, batch))

    def _write_batch(self, batch: dict[str, list[tuple[str, float]]]) -> None:
        for tenant, accesses in batch.items():
            try:
                self._write(tenant, accesses)
            except Exception as exc:
                with self._lock:
                    self._lost({tenant: accesses}, f"{type(exc).__name__}: {exc}")

    def _lost(self, batch: dict[str, list[tuple[str, float]]], why: str) -> None:
        n = sum(len(a) for a in batch.values())
        self.dropped += n
        log.error("memory_touch_failed: %d access counts not written: %s", n, why)

    def flush(self) -> None:
        """Wait for the writer thread, then write what is pending here (raising its error)."""
        with self._lock:
            executor, self._executor = self._executor, None
            self._inflight = []
        if executor is not None:
            executor.shutdown(wait=True)
        with self._lock:
            pending, self._pending, self._count = self._pending, {}, 0
        for tenant, accesses in pending.items():
            self._write(tenant, accesses)
