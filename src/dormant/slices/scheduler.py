"""The scheduler: claims ready threads, at most C slices at once, one per thread.

Claims are fair across tenants (the store shares slices out between the tenants with
ready work) and a tenant holds at most ``tenant_slices`` leases at once (0: no cap).

It claims only what it can run right now (free slots), so it never holds an
in-memory backlog: waiting work stays in the store. Leases of running slices are
renewed in one store call per period; a slice whose lease was lost is cancelled
(its commit would be refused anyway, and its model calls and inline tools would
repeat): when a renewal says so, and when renewals keep failing until the lease
has run out. (A slice cancelled while its commit is under way waits for it, and
ends as done if it landed: its own commit released the lease, so a renewal just
after it says "lost"; see :mod:`dormant.slices.landing`.) One thread never runs
two slices here at once: if the store hands out a thread again while its previous
slice still runs (its lease lapsed), that slice is cancelled and the new one starts
only once it has ended.

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
from collections.abc import Awaitable, Callable, Collection

from ..errors import SchemaError, WorkerIdInUse
from ..records import Claim
from ..store.base import Store
from .retry import STORE_RETRY_MAX_S, backoff, log_store_failure, pause

log = logging.getLogger("dormant.scheduler")


class _Running:
    """A slice running here: its claim (renewed), its task, when its lease runs out."""

    __slots__ = ("claim", "deadline", "task")

    task: asyncio.Task[None]  # set as soon as the entry is made (the task is given the entry)

    def __init__(self, claim: Claim, deadline: float) -> None:
        self.claim = claim
        self.deadline = deadline  # time.monotonic() at which the lease is surely gone


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
        agents: Collection[str] | None = None,
        tenant_slices: int = 0,
    ) -> None:
        self.store = store
        #: leases one tenant may hold at once over every worker of the store (0: no cap)
        self.tenant_slices = tenant_slices
        #: the agents hosted here: only their threads are claimed (None: any)
        self.agents = None if agents is None else tuple(agents)
        self.run_slice = run_slice
        self.worker = worker
        self.concurrency = concurrency
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.wake = asyncio.Event()
        self._running: dict[str, _Running] = {}
        # slices replaced by a newer claim of their thread, still ending (cancelled): a
        # newer slice of the thread starts only once every one of them has ended
        self._ending: dict[str, set[asyncio.Task[None]]] = {}
        self._hold_until = 0.0  # time.monotonic() before which nothing is claimed
        self.claim_failures = 0  # failed claims in a row (0 when the store answers)

    @property
    def active(self) -> int:
        """Slices running now (those still ending after their lease was lost included)."""
        return len(self._running) + sum(len(tasks) for tasks in self._ending.values())

    def slices(self) -> list[tuple[Claim, asyncio.Task[None]]]:
        """The running slices as (claim, task): the RSS governor cancels them in an emergency."""
        return [(r.claim, r.task) for r in self._running.values()]

    def running(self, thread_id: str) -> bool:
        """Whether this scheduler runs a slice of ``thread_id`` now."""
        return thread_id in self._running

    async def cancel(self, thread_id: str) -> Claim | None:
        """Cancel the slice of ``thread_id`` running here and wait for it to end; its claim,
        or None when none runs. The lease is still held: the caller releases it."""
        entry = self._running.get(thread_id)
        if entry is None or entry.task.done():
            return None
        entry.task.cancel()
        await asyncio.gather(entry.task, return_exceptions=True)
        return entry.claim

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
                free = self.concurrency - self.active
                claims: list[Claim] = []
                asked = time.monotonic()  # the lease runs from before the claim, at the latest
                if free > 0:
                    try:
                        claims = await self.store.claim_threads(
                            self.worker,
                            free,
                            self.lease_s,
                            agents=self.agents,
                            tenant_slices=self.tenant_slices,
                        )
                    except (SchemaError, WorkerIdInUse):  # no retry mends these
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
                    self._start(claim, asked + self.lease_s)
                # fewer claims than free slots: nothing else is ready; all slots busy:
                # wait for a slot. Either way, sleep until woken or the poll period ends.
                await self._sleep(stop)
        finally:
            renewer.cancel()
            tasks = [r.task for r in self._running.values()]
            tasks += [t for ending in self._ending.values() for t in ending]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)

    async def _sleep(self, stop: asyncio.Event) -> None:
        waiters = [asyncio.ensure_future(self.wake.wait()), asyncio.ensure_future(stop.wait())]
        try:
            await asyncio.wait(waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    def _start(self, claim: Claim, deadline: float) -> None:
        thread_id = claim.thread_id
        previous = self._running.get(thread_id)
        if previous is not None:
            # the thread's lease lapsed while its slice still runs here, and the store
            # handed it out again: that slice lost it; the new one waits for its end
            log.warning("lease_lost", extra={"thread_id": thread_id, "reclaimed": True})
            previous.task.cancel()
            ending = self._ending.setdefault(thread_id, set())
            ending.add(previous.task)
            previous.task.add_done_callback(lambda task: self._ended(thread_id, task))
        earlier = frozenset(self._ending.get(thread_id, ()))
        entry = _Running(claim, deadline)
        entry.task = asyncio.create_task(self._guard(claim, entry, earlier), name=f"slice:{thread_id}")
        self._running[thread_id] = entry

    def _ended(self, thread_id: str, task: asyncio.Task[None]) -> None:
        ending = self._ending.get(thread_id)
        if ending is not None:
            ending.discard(task)
            if not ending:
                del self._ending[thread_id]
        self.wake.set()

    async def _guard(self, claim: Claim, entry: _Running, earlier: frozenset[asyncio.Task[None]]) -> None:
        try:
            pending = [t for t in earlier if not t.done()]
            if pending:  # never two slices of one thread at once: wait for every earlier one
                await asyncio.wait(pending)
            await self.run_slice(claim)
        finally:
            if self._running.get(claim.thread_id) is entry:
                del self._running[claim.thread_id]  # only its own entry, never a successor's
            self.wake.set()

    def _expire(self) -> None:
        """Cancel the slices whose lease has run out unrenewed (called when renewals fail)."""
        now = time.monotonic()
        for thread_id, entry in self._running.items():
            if entry.deadline <= now and not entry.task.done() and not entry.task.cancelling():
                log.warning("lease_expired", extra={"thread_id": thread_id})
                entry.task.cancel()

    async def _renew(self, stop: asyncio.Event) -> None:
        period = self.lease_s / 3
        while not stop.is_set():
            await asyncio.sleep(period)
            entries = list(self._running.values())
            if not entries:
                continue
            asked = time.monotonic()
            try:
                kept = await self.store.renew_leases([e.claim for e in entries], self.lease_s)
            except Exception as exc:  # renewals go on; a lease that ran out meanwhile is lost
                log.warning("lease_renew_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
                # only while renewals fail: a slow renewal that succeeds is the store's word
                self._expire()
                continue
            held = {c.thread_id: c for c in kept}
            for sent in entries:
                entry = self._running.get(sent.claim.thread_id)
                if entry is not sent:
                    continue  # ended, or replaced by a newer claim meanwhile
                renewed = held.get(sent.claim.thread_id)
                if renewed is not None and renewed.token == sent.claim.token:
                    entry.claim = renewed
                    entry.deadline = asked + self.lease_s
                elif not entry.task.done():
                    log.warning("lease_lost", extra={"thread_id": sent.claim.thread_id})
                    entry.task.cancel()
