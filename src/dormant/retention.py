"""Tiered retention of long threads (issue 17 item 2), the part built so far:
tool results past the newest ``full_tool_calls`` of a thread keep only their head
(an excerpt that still names their blob, if any) and a note; the message stays, so
every assistant tool call keeps exactly one result. :func:`gc_round` is one bounded
pass over a page of threads that ``dormant gc`` repeats and a background task or the
memory governor's warn hook can call.
"""

from __future__ import annotations

from dataclasses import dataclass

from .journal import CheckpointPolicy
from .store.base import Store
from .store.core import RETENTION_NOTE

#: Appended to a tool result retention cut.
NOTE = RETENTION_NOTE


#: Default: the newest tool results of a thread kept whole.
FULL_TOOL_CALLS = 200
#: Default: characters an older tool result keeps.
HEAD_CHARS = 512


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    """What retention keeps (defaults from issue 17)."""

    #: the newest tool results of a thread kept whole
    full_tool_calls: int = FULL_TOOL_CALLS
    #: characters an older tool result keeps (an excerpt's header names its blob)
    head_chars: int = HEAD_CHARS
    #: most tool results cut per thread per round (bounded work)
    per_round: int = 500
    #: threads visited per round
    threads_per_round: int = 100

    def __post_init__(self) -> None:
        if min(self.full_tool_calls, self.per_round, self.threads_per_round) < 1 or self.head_chars < 0:
            raise ValueError("retention counts must be >= 1 and head_chars >= 0")


@dataclass(frozen=True, slots=True)
class GcRound:
    """What one :func:`gc_round` did; ``cursor`` is where the next round starts (None: the end)."""

    cursor: str | None
    threads: int
    shrunk: int
    checkpoints: int


async def gc_round(
    store: Store,
    policy: RetentionPolicy,
    checkpoints: CheckpointPolicy | None,
    now: float,
    cursor: str | None = None,
) -> GcRound:
    """One bounded pass: for a page of threads from ``cursor``, cut old tool results
    and write the state checkpoint that is due (if a policy is given)."""
    page = await store.list_threads(cursor=cursor, limit=policy.threads_per_round)
    shrunk = written = 0
    for thread in page.items:
        shrunk += await store.shrink_tool_results(
            thread.id, keep=policy.full_tool_calls, head_chars=policy.head_chars, limit=policy.per_round
        )
        if checkpoints is not None and await store.journal.maybe_checkpoint(thread.id, checkpoints, now):
            written += 1
    return GcRound(cursor=page.next_cursor, threads=len(page.items), shrunk=shrunk, checkpoints=written)
