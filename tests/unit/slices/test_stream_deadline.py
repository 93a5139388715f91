"""The deadlines of a model call (two, when it streams) and of a tool call, as
:func:`collect` and the dispatcher drive them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dormant.models.base import Finish, ModelEvent, TextDelta, collect
from dormant.slices.deadline import Deadline


async def _pieces(delays: list[float]) -> AsyncIterator[ModelEvent]:
    for i, delay in enumerate(delays):
        await asyncio.sleep(delay)
        yield TextDelta(text=f"p{i} ")
    yield Finish(reason="stop")


async def _run(deadline: Deadline, delays: list[float]) -> str:
    with deadline:
        reply = await collect(_pieces(delays), on_piece=deadline.piece)
    return reply.text


async def test_a_steady_stream_outlives_the_first_piece_deadline() -> None:
    """Ten pieces 20 ms apart (0.2 s) under a 50 ms first-piece deadline and a 50 ms
    gap: each piece moves the deadline, so the reply completes."""
    deadline = Deadline(0.05, 0.05)
    text = await _run(deadline, [0.02] * 10)
    assert text == "".join(f"p{i} " for i in range(10))
    assert deadline.pieces == 11  # the ten texts and the finish


async def test_nothing_before_the_first_deadline_names_it() -> None:
    deadline = Deadline(0.05, 10.0)
    with pytest.raises(TimeoutError):
        await _run(deadline, [0.5])
    assert deadline.pieces == 0
    assert "sent nothing within 0.05s" in deadline.reason()


async def test_a_stall_after_some_pieces_is_cut_within_twice_the_gap() -> None:
    deadline = Deadline(10.0, 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await _run(deadline, [0.0, 0.0, 0.0, 5.0])
    elapsed = loop.time() - started
    assert 0.05 <= elapsed < 0.5  # cut 0.05 s after the third piece
    assert deadline.pieces == 3
    assert "stalled: no piece for 0.05s after 3" in deadline.reason()


async def test_a_deadline_without_a_gap_is_one_timeout_whatever_the_pieces() -> None:
    """A tool call's deadline: pieces do not move it."""
    deadline = Deadline(0.1)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await _run(deadline, [0.03] * 10)
    assert 0.1 <= loop.time() - started < 0.5
    assert deadline.expired and 2 <= deadline.pieces < 10


async def test_a_cancellation_from_elsewhere_stays_a_cancellation() -> None:
    """The task cancelled by someone else inside the block: CancelledError, not a
    timeout; the one timer is gone."""
    deadline = Deadline(10.0, 10.0)
    started = asyncio.Event()

    async def call() -> None:
        with deadline:
            started.set()
            await asyncio.sleep(5)

    task = asyncio.create_task(call())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not deadline.expired
    assert deadline._handle is None


async def test_an_expiry_while_the_task_is_also_cancelled_stays_a_cancellation() -> None:
    """Cancelled from elsewhere after the deadline fired: the outer cancellation wins,
    as with asyncio.timeout."""
    deadline = Deadline(0.02)

    async def call() -> None:
        with deadline:
            try:
                await asyncio.sleep(5)
            finally:
                asyncio.current_task().cancel()  # type: ignore[union-attr]
                await asyncio.sleep(0)

    task = asyncio.create_task(call())
    with pytest.raises(asyncio.CancelledError):
        await task
    assert deadline.expired


async def test_a_deadline_is_refused_outside_a_task() -> None:
    loop = asyncio.get_running_loop()
    refused: asyncio.Future[BaseException] = loop.create_future()

    def callback() -> None:  # on the loop, in no task
        try:
            with Deadline(1.0):
                pass
        except RuntimeError as exc:
            refused.set_result(exc)

    loop.call_soon(callback)
    assert "inside a task" in str(await refused)
