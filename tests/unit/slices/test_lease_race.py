"""A renewal that answers "lost" because the slice's own commit just released the lease."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from dormant.agent import Agent
from dormant.bench.context import turn
from dormant.config import Settings
from dormant.errors import LeaseLost
from dormant.models.base import ModelReply, ModelRequest
from dormant.models.scripted import ScriptedModel
from dormant.records import Claim, CommitPlan
from dormant.runtime import Runtime
from dormant.slices.landing import land
from tests.helpers import all_messages


async def test_a_slice_whose_commit_landed_counts_when_a_renewal_then_says_lost(tmp_path: Path) -> None:
    def script(request: ModelRequest) -> ModelReply:
        return ModelReply(text="done")

    settings = Settings.build(lease_s=0.06, poll_s=0.005)
    agent = Agent(name="a", model=ScriptedModel(script), builtins=False)
    async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent], settings=settings) as rt:
        store = rt.store
        commit, renew = store.commit_slice, store.renew_leases
        renewed = asyncio.Event()
        answers: list[int] = []

        async def renew_leases(claims: Sequence[Claim], lease_s: float) -> list[Claim]:
            kept = await renew(claims, lease_s)
            answers.append(len(kept))
            renewed.set()
            return kept

        async def commit_slice(plan: CommitPlan) -> None:
            await commit(plan)  # durable: the reply is written and the lease released
            # before the slice resumes, a renewal (its batch after the commit's) finds the
            # lease gone: what a busy loop does between a commit and its caller's wake-up
            renewed.clear()
            await renewed.wait()

        store.commit_slice = commit_slice  # type: ignore[method-assign]
        store.renew_leases = renew_leases  # type: ignore[method-assign]
        running = asyncio.create_task(rt.run())
        try:
            await asyncio.wait_for(turn(rt, "t", "hello", "k"), 5)
        finally:
            rt.stop()
            await asyncio.wait_for(running, 5)
        assert 0 in answers, "a renewal said the lease was lost"
        assert [m.role for m in await all_messages(store, "t")] == ["user", "assistant"]
        assert (rt.stats.slices, rt.stats.leases_lost) == (1, 0)


async def _cancelled_during(outcome: BaseException | None) -> asyncio.Task[None]:
    """A task in :func:`land` over a write that ends with ``outcome`` after the task
    was cancelled; the task, ended."""
    release = asyncio.Event()

    async def write() -> None:
        await release.wait()
        if outcome is not None:
            raise outcome

    task = asyncio.create_task(land(write()))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.sleep(0)
    assert not task.done(), "the task waits for its write"
    release.set()
    await asyncio.gather(task, return_exceptions=True)
    return task


async def test_a_cancelled_commit_that_lands_ends_the_slice_as_done() -> None:
    task = await _cancelled_during(None)
    assert not task.cancelled() and task.exception() is None


async def test_a_cancelled_commit_that_is_refused_ends_the_slice_cancelled() -> None:
    assert (await _cancelled_during(LeaseLost("gone"))).cancelled()


async def test_a_commit_cancelled_twice_and_between_its_waits_lands_and_is_done() -> None:
    """Cancellations at each of the commit's waits (a future, then a bare pass of the
    loop) neither cancel what it awaits nor stop it: it runs to its end."""
    loop = asyncio.get_running_loop()
    first: asyncio.Future[int] = loop.create_future()
    steps: list[str] = []

    async def write() -> None:
        steps.append(f"value {await first}")
        await asyncio.sleep(0)
        steps.append("after a pass")

    task = asyncio.create_task(land(write()))
    await asyncio.sleep(0)
    task.cancel()
    task.cancel()
    await asyncio.sleep(0)
    assert not first.cancelled(), "the commit's own future is never cancelled"
    first.set_result(7)
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert steps == ["value 7", "after a pass"]
    assert not task.cancelled() and task.exception() is None
    assert task.cancelling() == 0, "every cancellation was withdrawn"


async def test_a_commit_runs_in_the_callers_task() -> None:
    """No task of its own: the commit sees its caller as the current task."""
    seen: list[asyncio.Task[object] | None] = []

    async def write() -> None:
        seen.append(asyncio.current_task())

    await land(write())
    assert seen == [asyncio.current_task()]


async def test_an_uncancelled_commit_raises_its_own_error() -> None:
    async def refused() -> None:
        raise LeaseLost("gone")

    with pytest.raises(LeaseLost):
        await land(refused())


async def test_a_turn_that_never_finishes_fails_the_benchmark_instead_of_hanging(tmp_path: Path) -> None:
    agent = Agent(name="a", model=ScriptedModel(lambda request: ModelReply(text="done")), builtins=False)
    async with Runtime(f"sqlite:///{tmp_path}/x.db", [agent]) as rt:
        # nothing runs the runtime: the input is admitted and never answered
        with pytest.raises(TimeoutError, match=r"not done within 0\.2 s"):
            await asyncio.wait_for(turn(rt, "t", "hello", "k", timeout_s=0.2), 5)
