"""A slice's commit, awaited to its outcome even when the slice is cancelled meanwhile.

A write handed to the store is not taken back by cancelling its caller: the queued job
runs (and, with its lease still held, commits) whether anyone waits for it or not. And
a commit releases the lease it checked, so a renewal that runs between the commit and
its caller's wake-up finds the lease gone and says "lost", and the scheduler cancels a
slice that has in fact committed. (The SQLite store answers a commit that writes back
token counts through two tasks, a renewal in the same batch through one: the renewer
wakes first.) Counted as lost, such a slice left its reply written but the slice not
counted nor announced, and whoever waited for it waited on.

So :func:`land` waits for the commit's outcome through any cancellation: a commit that
landed ends the slice as done (the cancellation is withdrawn: nothing was left to stop);
one refused (its lease truly lost) or failed ends it cancelled, as asked. The wait is
the store's own write, bounded as any commit is.

The commit runs in the slice's own task, stepped here: each future it awaits is waited
for through a waiter of our own, so a cancellation cancels the waiter and never the
store's future. (A task of its own and a shield around it cost ~10 µs per commit, 5 %
of a short slice's CPU.) So a commit must not bound its own waits by cancelling its task
(``asyncio.timeout`` inside it): that cancellation is absorbed here like any other. The
stores' commits await their writers' futures; a writer bounds its work in its own task.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from functools import partial
from typing import Any


async def land(commit: Coroutine[Any, Any, None]) -> None:
    """Await ``commit`` to its end; cancelled meanwhile: return if it landed, else re-raise."""
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    try:
        while True:
            try:
                awaited = commit.send(None)  # runs the commit to its next wait
            except StopIteration:
                break  # landed
            except BaseException:
                if task is not None and task.cancelling() > before:
                    raise asyncio.CancelledError from None  # not landed: cancelled, as asked
                raise  # as it came
            await _outlast(awaited)
    finally:
        commit.close()  # a no-op once it ended; else (never expected) it is not left suspended
    if task is not None:
        for _ in range(task.cancelling() - before):  # landed: nothing is left to cancel
            task.uncancel()


def _wake(waiter: asyncio.Future[None], _done: object) -> None:
    if not waiter.done():
        waiter.set_result(None)


async def _outlast(awaited: Any) -> None:
    """Wait until ``awaited`` (what a coroutine yielded: a future, or None for one pass of
    the loop) is done, whatever cancellations reach the caller meanwhile."""
    if awaited is None:
        with contextlib.suppress(asyncio.CancelledError):  # counted through task.cancelling()
            await asyncio.sleep(0)
        return
    awaited._asyncio_future_blocking = False  # taken, as a task takes it
    loop = asyncio.get_running_loop()
    while not awaited.done():
        waiter = loop.create_future()
        wake = partial(_wake, waiter)
        awaited.add_done_callback(wake)
        try:
            await waiter
        except asyncio.CancelledError:
            awaited.remove_done_callback(wake)  # the caller's cancellation, not the commit's
