"""The bounded queue behind both backends' group commits.

Callers :meth:`BatchQueue.submit` a job and wait; one task takes what is queued
(bounded by jobs and bytes per batch), hands the batch to the backend's
``apply`` — which runs it in one transaction and returns ``(ok, value)`` per job
— and answers every caller. The queue itself is bounded in jobs and bytes: past
the bound, :meth:`submit` raises ``Overloaded`` instead of buffering.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from ..errors import Overloaded, StoreError

J = TypeVar("J")
Result = tuple[bool, Any]
Apply = Callable[[list[J]], Awaitable[list[Result]]]

log = logging.getLogger("dormant.store")


class BatchQueue(Generic[J]):
    """Submitted jobs, applied in batches by one task; each caller gets its own result."""

    def __init__(
        self,
        apply: Apply[J],
        *,
        name: str,
        batch_jobs: int,
        batch_bytes: int,
        queue_jobs: int,
        queue_bytes: int,
    ) -> None:
        self.apply = apply
        self.batch_jobs = batch_jobs
        self.batch_bytes = batch_bytes
        self.queue_jobs = queue_jobs
        self.queue_bytes = queue_bytes
        self._queue: deque[tuple[J, asyncio.Future[Any], int]] = deque()
        self._queued_bytes = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._task = asyncio.create_task(self._loop(), name=name)

    async def submit(self, job: J, size: int = 256) -> Any:
        """Queue ``job`` and return its value once the batch holding it was applied."""
        if self._closing:
            raise StoreError("the store is closing")
        if len(self._queue) >= self.queue_jobs or self._queued_bytes + size > self.queue_bytes:
            raise Overloaded("the store's write queue is full", retry_after=0.5)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append((job, future, size))
        self._queued_bytes += size
        self._wake.set()
        return await future

    async def close(self) -> None:
        """Apply what is queued, then stop."""
        self._closing = True
        self._wake.set()
        await self._task

    async def _loop(self) -> None:
        while True:
            if not self._queue:
                if self._closing:
                    return
                await self._wake.wait()
                self._wake.clear()
                continue
            batch: list[tuple[J, asyncio.Future[Any], int]] = []
            size = 0
            while self._queue and len(batch) < self.batch_jobs and size < self.batch_bytes:
                item = self._queue.popleft()
                batch.append(item)
                size += item[2]
            self._queued_bytes -= size
            try:
                results = await self.apply([b[0] for b in batch])
            except Exception as exc:  # the queue must outlive any one batch
                log.error("store_batch_failed", extra={"error": repr(exc)})
                error = StoreError(f"the write failed: {exc!r}")
                error.__cause__ = exc
                results = [(False, error)] * len(batch)
            for (_, future, _), (ok, value) in zip(batch, results, strict=True):
                if future.done():
                    continue
                if ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
