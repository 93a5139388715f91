"""Retry timing shared by the scheduler, the dispatcher and the slice runner.

Exponential backoff with jitter, the cap on pauses while the store keeps failing,
a log of failure streaks that does not flood, and a sleep that ends when asked to
stop. Nothing here touches the store: the loops that retry own their calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random

from ..errors import DormantError

#: Longest pause between two attempts at a store that keeps failing (locked, full).
STORE_RETRY_MAX_S = 5.0


def backoff(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Delay before retry number ``attempt`` (1, 2, ...): exponential, capped, jittered."""
    delay: float = min(cap, base * (2 ** max(0, min(attempt, 64) - 1)))
    jitter = (rng or random).uniform(0.8, 1.2)
    return min(cap, delay * jitter)


def log_store_failure(logger: logging.Logger, event: str, exc: BaseException, streak: int) -> None:
    """Log failure number ``streak`` in a row of a store call, without flooding the log.

    The 1st, 2nd, 4th, 8th, ... failure of a streak is a warning (the others are debug);
    an exception that is not a :class:`DormantError` (a bug, not a store condition)
    is logged with its traceback.
    """
    level = logging.WARNING if streak & (streak - 1) == 0 else logging.DEBUG
    logger.log(
        level,
        event,
        extra={"error": f"{type(exc).__name__}: {exc}", "failures": streak},
        exc_info=None if isinstance(exc, DormantError) else exc,
    )


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)


def capped(delay: float, cap: float) -> float:
    """``delay`` (seconds, e.g. a server's ``Retry-After``) within 0..``cap``: ``inf`` and
    ``1e12`` become ``cap``; a negative or NaN delay becomes 0."""
    if not delay >= 0:  # NaN compares false
        return 0.0
    return min(delay, cap)
