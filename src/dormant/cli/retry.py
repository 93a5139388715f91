"""``dormant retry --all-failed [--since ...]``: make every failed thread run again
(and the options of ``dormant retry`` and ``dormant chat`` for real model servers).

Pages through the store's thread listing (never the whole table in memory) and
retries each failed thread whose last change is at or after ``since``.
"""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Annotated

import typer

from ..errors import NotFound, UsageError
from ..records import Thread
from ..store import Store
from .agents import ContextWindowOpt as ContextWindowOpt
from .agents import MaxOutputOpt as MaxOutputOpt
from .base import out

AllFailedOpt = Annotated[
    bool, typer.Option("--all-failed", envvar="DORMANT_RETRY_ALL", help="Retry every failed thread.")
]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        envvar="DORMANT_RETRY_SINCE",
        help="With --all-failed: only threads failed since this ISO time or duration (2h, 1d).",
    ),
]
BuiltinsOpt = Annotated[
    bool,
    typer.Option(
        "--builtins/--no-builtins",
        envvar="DORMANT_BUILTINS",
        help="Give the built-in agent spawn_thread, sleep_until, ... (off: a chat is one thread).",
    ),
]

#: Threads read per page of the listing.
PAGE = 500

_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhd])$")
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_since(value: str, now: float | None = None) -> float:
    """``value`` as a Unix time: an ISO 8601 time (UTC unless it says otherwise) or a
    duration back from now (``90s``, ``15m``, ``2h``, ``1d``). Raises :class:`UsageError`."""
    text = value.strip()
    match = _DURATION.match(text)
    if match:
        return (time.time() if now is None else now) - float(match.group(1)) * _UNIT[match.group(2)]
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise UsageError(
            f"--since {value!r} must be an ISO 8601 time or a duration such as 90s, 15m, 2h, 1d"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


async def failed_threads(store: Store, since: float = 0.0) -> AsyncIterator[Thread]:
    """Failed threads changed at or after ``since``, page by page."""
    cursor: str | None = None
    while True:
        page = await store.list_threads(cursor=cursor, limit=PAGE)
        for thread in page.items:
            if thread.status == "failed" and thread.updated_at >= since:
                yield thread
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


async def retry_all_failed(store: Store, since: float = 0.0) -> list[Thread]:
    """Retry every failed thread changed at or after ``since``; the threads as they were
    before (a thread deleted meanwhile is skipped)."""
    retried: list[Thread] = []
    # collect the ids first: retrying while paging would change what the pages hold
    found = [thread async for thread in failed_threads(store, since)]
    for thread in found:
        try:
            await store.retry_thread(thread.id)
        except NotFound:
            continue
        retried.append(thread)
    return retried


async def print_retry_all(store: Store, since: str | None) -> None:
    """``dormant retry --all-failed [--since ...]``: retry and print each thread, then the count."""
    retried = await retry_all_failed(store, parse_since(since) if since else 0.0)
    for row in retried:
        out.print(f"thread {row.id} is active again (was failed: {row.error})")
    out.print(f"{len(retried)} failed thread(s) retried")
