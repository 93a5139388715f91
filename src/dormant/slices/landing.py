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
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any


async def land(commit: Coroutine[Any, Any, None]) -> None:
    """Await ``commit`` to its end; cancelled meanwhile: return if it landed, else re-raise."""
    write = asyncio.ensure_future(commit)
    task = asyncio.current_task()
    before = task.cancelling() if task is not None else 0
    while not write.done():
        with contextlib.suppress(asyncio.CancelledError, Exception):  # the outcome is read below
            await asyncio.shield(write)
    asked = task.cancelling() - before if task is not None else 0
    if task is None or asked <= 0:
        write.result()  # as it came: its value, or its error
        return
    if write.cancelled() or write.exception() is not None:
        raise asyncio.CancelledError  # not landed: cancelled, as asked
    for _ in range(asked):  # landed: the slice is done, nothing is left to cancel
        task.uncancel()
