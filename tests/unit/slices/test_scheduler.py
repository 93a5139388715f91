"""The scheduler over the in-memory store: concurrency bound, single flight, lease renewal."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection, Sequence

from dormant.errors import StoreLocked
from dormant.records import Claim, CommitPlan, NewInput, SliceLoad, ViewLimits
from dormant.slices.scheduler import Scheduler
from dormant.store.sqlite import SQLiteStore
from tests.helpers import eventually


def user(thread_id: str, key: str = "k") -> NewInput:
    return NewInput(thread_id=thread_id, kind="user", dedup_key=key, content="x", agent="a")


async def consume(store: SQLiteStore, claim: Claim, load: SliceLoad | None = None) -> None:
    """Commit a slice that consumes the loaded inputs and writes nothing else."""
    load = load or await store.load_slice(claim, ViewLimits())
    await store.commit_slice(
        CommitPlan(
            thread_id=claim.thread_id,
            token=claim.token,
            consumed=tuple(i.id for i in load.inputs),
            messages=(),
        )
    )


async def run_until(scheduler: Scheduler, done: asyncio.Event, timeout: float = 10.0) -> None:
    stop = asyncio.Event()
    runner = asyncio.create_task(scheduler.run(stop))
    try:
        async with asyncio.timeout(timeout):
            await done.wait()
    finally:
        stop.set()
        await runner


async def test_never_more_than_c_slices_and_one_per_thread() -> None:
    store = SQLiteStore("memory://")
    await store.open()
    await store.admit([user(f"t{i}") for i in range(20)])
    running: set[str] = set()
    peak = 0
    finished: list[str] = []
    done = asyncio.Event()

    async def run_slice(claim: Claim) -> None:
        nonlocal peak
        assert claim.thread_id not in running, "two slices of one thread"
        running.add(claim.thread_id)
        peak = max(peak, len(running))
        await asyncio.sleep(0.02)
        running.discard(claim.thread_id)
        await consume(store, claim)
        finished.append(claim.thread_id)
        if len(finished) == 20:
            done.set()

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=4, lease_s=10.0, poll_s=0.01)
    await run_until(scheduler, done)
    assert peak == 4
    assert sorted(finished) == sorted(f"t{i}" for i in range(20))
    assert scheduler.active == 0


async def test_new_input_during_a_slice_runs_after_it() -> None:
    store = SQLiteStore("memory://")
    await store.open()
    await store.admit([user("t1", "k1")])
    order: list[str] = []
    done = asyncio.Event()

    async def run_slice(claim: Claim) -> None:
        load = await store.load_slice(claim, ViewLimits())
        keys = [i.dedup_key for i in load.inputs]
        order.append(",".join(keys))
        if keys == ["k1"]:
            await store.admit([user("t1", "k2")])  # arrives mid-slice
            await asyncio.sleep(0.05)
        await consume(store, claim, load)
        if "k2" in keys:
            done.set()

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=8, lease_s=10.0, poll_s=0.01)
    await run_until(scheduler, done)
    assert order == ["k1", "k2"]


async def test_leases_of_long_slices_are_renewed() -> None:
    store = SQLiteStore("memory://")
    await store.open()
    await store.admit([user("t1")])
    done = asyncio.Event()
    stolen: list[Claim] = []

    async def run_slice(claim: Claim) -> None:
        await asyncio.sleep(0.5)  # longer than the lease
        stolen.extend(await store.claim_threads("thief", 10, 0.3))
        await consume(store, claim)  # LeaseLost if the lease had lapsed
        done.set()

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=1, lease_s=0.3, poll_s=0.01)
    await run_until(scheduler, done)
    assert stolen == []


async def test_a_slice_whose_lease_is_lost_is_cancelled() -> None:
    store = SQLiteStore("memory://")
    await store.open()
    await store.admit([user("t1")])
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def lose_everything(claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        return []

    store.renew_leases = lose_everything  # type: ignore[method-assign]

    async def run_slice(claim: Claim) -> None:
        started.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=1, lease_s=0.15, poll_s=0.01)
    stop = asyncio.Event()
    runner = asyncio.create_task(scheduler.run(stop))
    try:
        async with asyncio.timeout(5):
            await started.wait()
            await cancelled.wait()

        async def idle() -> bool:
            return scheduler.active == 0

        await eventually(idle)
    finally:
        stop.set()
        await runner


class LockedRenewals(SQLiteStore):
    """A store whose lease renewals fail (locked by another process), and that hands
    a thread out again once its lease expired, as every store does."""

    async def renew_leases(self, claims: Sequence[Claim], lease_s: float) -> list[Claim]:
        raise StoreLocked("database is locked")


async def test_a_thread_whose_lease_lapsed_mid_slice_never_runs_twice_at_once() -> None:
    """Renewals fail, the lease expires, the same scheduler claims the thread
    again; the new slice starts only once the old one ended, and the old one's end does
    not drop the new one from the running set."""
    store = LockedRenewals("memory://")
    await store.open()
    await store.admit([user("t1")])
    running = 0
    peak = 0
    slices: list[str] = []
    entered: list[bool] = []  # whether the scheduler still held the later slice's entry
    done = asyncio.Event()

    async def run_slice(claim: Claim) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        slices.append(claim.token)
        try:
            if len(slices) == 1:
                # the first slice does not stop at once when cancelled (a model call
                # winding down): its lease lapses and the thread is claimed again meanwhile,
                # several times over (each newer claim's lease lapses while it waits too)
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    await asyncio.sleep(0.8)
                    raise
            else:
                assert scheduler.active >= 1, "the running slice is still counted"
                entered.append(scheduler.running("t1"))  # after every earlier slice ended
                await consume(store, claim)
                done.set()
        finally:
            running -= 1

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=4, lease_s=0.15, poll_s=0.01)
    await run_until(scheduler, done)
    assert peak == 1, "two slices of one thread ran at once"
    assert len(slices) >= 2 and len(set(slices)) == len(slices)
    assert entered and all(entered), "an earlier slice's end dropped a later one's entry"
    assert scheduler.active == 0


async def test_a_slice_whose_lease_ran_out_unrenewed_is_cancelled() -> None:
    """Renewals keep failing and nobody claims the thread again; the slice
    is cancelled once its lease has run out (its commit would be refused anyway)."""

    class NoReclaim(LockedRenewals):
        claimed = False

        async def claim_threads(
            self,
            worker: str,
            limit: int,
            lease_s: float,
            *,
            agents: Collection[str] | None = None,
            tenant_slices: int = 0,
        ) -> list[Claim]:
            if self.claimed:
                return []
            claims = await super().claim_threads(
                worker, limit, lease_s, agents=agents, tenant_slices=tenant_slices
            )
            self.claimed = bool(claims)
            return claims

    store = NoReclaim("memory://")
    await store.open()
    await store.admit([user("t1")])
    cancelled = asyncio.Event()
    lease_s = 0.2

    async def run_slice(claim: Claim) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    scheduler = Scheduler(store, run_slice, worker="w", concurrency=1, lease_s=lease_s, poll_s=0.01)
    started = time.monotonic()
    await run_until(scheduler, cancelled, timeout=5)
    assert time.monotonic() - started >= lease_s * 0.9, "not before the lease ran out"
    assert scheduler.active == 0
