"""A deadline on the code inside a ``with`` block, cheap enough for every model and tool call.

``asyncio.timeout`` does the same for one fixed deadline; a streamed model reply has two
(``first_s`` to its first piece, then ``gap_s`` between pieces) and a deadline that moves
with every piece. Moving an ``asyncio.timeout`` cancels and re-queues an event-loop
timer; entering and leaving one, with its first move, cost ~11 µs per call against
~3 µs here, and a short slice makes two model calls and one tool call.

So a :class:`Deadline` keeps one timer and moves nothing when a piece arrives: a piece
only notes the time. When the timer fires, it checks the deadline in force and, if it
has not passed, sets itself again for when it would: at most once per ``gap_s`` of a
stream, never at each piece. A call that ends first leaves its one timer cancelled.

On expiry the task is cancelled, and the block exits with :class:`TimeoutError`, as
``asyncio.timeout`` does: a cancellation from elsewhere (the task's own ``cancel()``)
stays a :class:`asyncio.CancelledError`.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType


class Deadline:
    """``first_s`` to the first :meth:`piece` (or to the end, when no gap is given), then
    ``gap_s`` after each piece. A stalled stream is cut ``gap_s`` after its last piece."""

    __slots__ = (
        "_cancelling",
        "_expired",
        "_handle",
        "_last",
        "_loop",
        "_started",
        "_task",
        "first_s",
        "gap_s",
        "pieces",
    )

    def __init__(self, first_s: float, gap_s: float | None = None) -> None:
        self.first_s = first_s
        self.gap_s = math.inf if gap_s is None else gap_s
        self.pieces = 0
        self._last = 0.0
        self._expired = False
        self._handle: asyncio.TimerHandle | None = None

    def __enter__(self) -> Deadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline is used inside a task")
        loop = asyncio.get_running_loop()
        self._task, self._loop = task, loop
        self._cancelling = task.cancelling()
        self._started = now = loop.time()
        self._handle = loop.call_at(now + min(self.first_s, self.gap_s), self._check)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._expired and self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
            raise TimeoutError from error

    def piece(self) -> None:
        """A piece arrived: the gap deadline runs from now."""
        self.pieces += 1
        self._last = self._loop.time()

    @property
    def expired(self) -> bool:
        """Whether the deadline passed and cancelled the task."""
        return self._expired

    def _check(self) -> None:
        now = self._loop.time()
        if self.pieces and self.gap_s < math.inf:
            due = self._last + self.gap_s
            wake = due
        else:  # a first piece may come any time: look again within a gap
            due = self._started + self.first_s
            wake = min(due, now + self.gap_s)
        if now >= due:
            self._handle = None
            self._expired = True
            self._task.cancel()
            return
        self._handle = self._loop.call_at(wake, self._check)

    def reason(self) -> str:
        """Why a model call timed out, naming the deadline that passed and its setting."""
        if self.pieces == 0:
            return (
                f"the model sent nothing within {self.first_s:g}s "
                "(model_timeout_s, DORMANT_MODEL_TIMEOUT_S / --model-timeout)"
            )
        return (
            f"the model's stream stalled: no piece for {self.gap_s:g}s after {self.pieces} "
            "(model_stream_timeout_s, DORMANT_MODEL_STREAM_TIMEOUT_S / --model-stream-timeout)"
        )
