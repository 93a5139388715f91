"""The two deadlines of a streamed model call, as :func:`collect` drives them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from dormant.models.base import Finish, ModelEvent, TextDelta, collect
from dormant.slices.replies import StreamDeadline


async def _pieces(delays: list[float]) -> AsyncIterator[ModelEvent]:
    for i, delay in enumerate(delays):
        await asyncio.sleep(delay)
        yield TextDelta(text=f"p{i} ")
    yield Finish(reason="stop")


async def _run(deadline: StreamDeadline, delays: list[float]) -> str:
    async with asyncio.timeout(deadline.first_s) as scope:
        reply = await collect(_pieces(delays), on_piece=deadline.on_piece(scope))
    return reply.text


async def test_a_steady_stream_outlives_the_first_piece_deadline() -> None:
    """Ten pieces 20 ms apart (0.2 s) under a 50 ms first-piece deadline and a 50 ms
    gap: each piece moves the deadline, so the reply completes."""
    deadline = StreamDeadline(0.05, 0.05)
    text = await _run(deadline, [0.02] * 10)
    assert text == "".join(f"p{i} " for i in range(10))
    assert deadline.pieces == 11  # the ten texts and the finish


async def test_nothing_before_the_first_deadline_names_it() -> None:
    deadline = StreamDeadline(0.05, 10.0)
    with pytest.raises(TimeoutError):
        await _run(deadline, [0.5])
    assert deadline.pieces == 0
    assert "sent nothing within 0.05s" in deadline.reason()


async def test_a_stall_after_some_pieces_is_cut_within_twice_the_gap() -> None:
    deadline = StreamDeadline(10.0, 0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError):
        await _run(deadline, [0.0, 0.0, 0.0, 5.0])
    assert loop.time() - started < 1.0  # cut between 0.05 and 0.1 s after the third piece
    assert deadline.pieces == 3
    assert "stalled: no piece for 0.05s after 3" in deadline.reason()
