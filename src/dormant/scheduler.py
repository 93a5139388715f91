"""The scheduler: claims ready threads, at most C slices at once, one per thread.

It claims only what it can run right now (free slots), so it never holds an
in-memory backlog: waiting work stays in the store. Leases of running slices are
renewed in one store call per period; a slice whose lease was lost is cancelled
(its commit would be refused anyway).

The loop survives the store failing under it (locked by another process, disk
full, ...): a failed claim is logged and retried with a capped backoff, and
:meth:`Scheduler.hold` lets the runtime pause claiming while the store cannot
take commits. Only a damaged database (:class:`~dormant.errors.SchemaError`)
ends the loop, with that error: nothing can run on it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from .dispatcher import STORE_RETRY_MAX_S, backoff, log_store_failure, pause
from .errors import SchemaError
from .records import Claim
from .store.base import Store

log = logging.getLogger("dormant.scheduler")


class Scheduler:
    """Runs ``run_slice(claim)`` for claimed threads, ``concurrency`` at a time."""

    def __init__(
        self,
        store: Store,
        run_slice: Callable[[Claim], Awaitable[None]],
        *,
        worker: str,
        concurrency: int,
        lease_s: float,
        poll_s: float,
    ) -> None:
        self.store = store
        self.run_slice = run_slice
        self.worker = worker
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.wake = asyncio.Event()
        self._running: dict[str, tuple[Claim, asyncio.Task[None]]] = {}
        self._hold_until = 0.0  # time.monotonic() before which nothing is claimed
        self.claim_failures = 0  # failed claims in a row (0 when the store answers)

    @property
    def active(self) -> int:
        """Slices running now."""
        return len(self._running)

    def running(self, thread_id: str) -> bool:
        """Whether this scheduler runs a slice of ``thread_id`` now."""
        return thread_id in self._running

    async def cancel(self, thread_id: str) -> Claim | None:
        """Cancel the slice of ``thread_id`` running here and wait for it to end; its claim,
        or None when none runs. The lease is still held: the caller releases it."""
        entry = self._running.get(thread_id)
        if entry is None:
            return None
        claim, task = entry
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return claim

    def hold(self, seconds: float) -> None:
        """Claim nothing for ``seconds`` (the store cannot commit now); running slices go on."""
        self._hold_until = max(self._hold_until, time.monotonic() + seconds)

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and run slices until ``stop`` is set; then wait for running slices.

        Raises :class:`SchemaError` (after running slices end) if the database is damaged.
        """
        renewer = asyncio.create_task(self._renew(stop), name="dormant-lease-renewer")
        try:
            while not stop.is_set():
                held = self._hold_until - time.monotonic()
                if held > 0:
                    await pause(stop, min(held, self.poll_s * 10))
                    continue
                self.wake.clear()  # before claiming, so a wake-up during the claim is kept
                free = self.concurrency - len(self._running)
                claims: list[Claim] = []
                if free > 0:
                    try:
                        claims = await self.store.claim_threads(self.worker, free, self.lease_s)
                    except SchemaError:
                        raise
                    except Exception as exc:  # the loop must outlive any store failure
                        self.claim_failures += 1
                        log_store_failure(log, "claim_failed", exc, self.claim_failures)
                        delay = backoff(self.claim_failures, self.poll_s, STORE_RETRY_MAX_S)
                        await pause(stop, delay)
                        continue
                    if self.claim_failures:
                        log.warning("claims_resumed", extra={"failures": self.claim_failures})
                        self.claim_failures = 0
                for claim in claims:
                    task = asyncio.create_task(self._guard(claim), name=f"slice:{claim.thread_id}")
                    self._running[claim.thread_id] = (claim, task)
                # fewer claims than free slots: nothing else is ready; all slots busy:
                # wait for a slot. Either way, sleep until woken or the poll period ends.
                await self._sleep(stop)
        finally:
            renewer.cancel()
            if self._running:
                await asyncio.gather(*(t for _, t in self._running.values()), return_exceptions=True)

    async def _sleep(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _guard(self, claim: Claim) -> None:
        try:
            await self.run_slice(claim)
        finally:
            self._running.pop(claim.thread_id, None)
            self.wake.set()

    async def _renew(self, stop: asyncio.Event) -> None:
        period = self.lease_s / 3
        while not stop.is_set():
            await asyncio.sleep(period)
            claims = [claim for claim, _ in self._running.values()]
            if not claims:
                continue
            try:
                kept = await self.store.renew_leases(claims, self.lease_s)
            except Exception as exc:  # renewals go on; a lease that expires meanwhile is lost
                log.warning("lease_renew_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                continue
            held = {c.thread_id: c for c in kept}
            for claim in claims:
                entry = self._running.get(claim.thread_id)
                if entry is None or entry[0].token != claim.token:
                    continue
                if claim.thread_id in held:
                    self._running[claim.thread_id] = (held[claim.thread_id], entry[1])
                else:
                    log.warning("lease_lost", extra={"thread_id": claim.thread_id})
                    entry[1].cancel()
