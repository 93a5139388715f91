"""State-change events: a long-term register change fanned out to the subject's
other open threads, with the inbox priority of the key's class, so P0 goes first.

When a slice of a subject's thread writes its subject's long-term register (a key
declared long term, or ``set_state(..., scope="subject")``), every other active thread
of that subject (at most :data:`MAX_FANOUT`, the most recently updated first; found by
the ``threads_subject`` index) gets an ``event`` input saying what changed. The inputs
are admissions of the slice's own plan, so they commit in its transaction (or not at
all); the dedup key names the source thread, its commit (first message seq) and the key,
so a change is delivered once. Their priority is the key's class:

* **P0** — complaints, refunds, account freezes (``complaint``, ``refund``,
  ``account_status``, ``account_freeze``, ``fraud``);
* **P1** — orders, coupons, addresses (``order``, ``coupon``, ``address``, ``payment``);
* **P2** — browsing (``browsing``, ``viewed``, ``interest``).

A key belongs to the class of the configured name it equals, else of the longest one
it starts with followed by ``_`` (``refund_status`` → ``refund`` → P0), else to
:data:`DEFAULT_PRIORITY` (P1). The map is per agent
(:attr:`~dormant.subject.SubjectOptions.priorities`). Since a claim takes the threads
whose best ready input has the best sort key (priority first, then age), the P0 events
are delivered before P1 and P2 ones admitted earlier.

Pure: :func:`events` builds the admissions; :mod:`dormant.slices.memory` finds the
threads and puts the admissions in the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

from ..records import NewInput, Priority

__all__ = ["DEFAULT_PRIORITIES", "DEFAULT_PRIORITY", "MAX_FANOUT", "events", "priority_of"]

#: The default class of a long-term register key (see the module docstring).
DEFAULT_PRIORITIES: Final[Mapping[str, Priority]] = MappingProxyType(
    {
        "complaint": Priority.P0,
        "refund": Priority.P0,
        "account_status": Priority.P0,
        "account_freeze": Priority.P0,
        "fraud": Priority.P0,
        "order": Priority.P1,
        "coupon": Priority.P1,
        "address": Priority.P1,
        "payment": Priority.P1,
        "browsing": Priority.P2,
        "viewed": Priority.P2,
        "interest": Priority.P2,
    }
)
#: The priority of a key no configured name covers.
DEFAULT_PRIORITY: Final = Priority.P1
#: Most threads one change is fanned out to (the most recently updated first).
MAX_FANOUT: Final = 64
#: Longest value shown in an event's text (the register holds the whole value).
MAX_VALUE_CHARS: Final = 500


def priority_of(key: str, priorities: Mapping[str, Priority] = DEFAULT_PRIORITIES) -> Priority:
    """The inbox priority of a change of long-term register key ``key``."""
    found = priorities.get(key)
    if found is not None:
        return found
    best = ""
    for name in priorities:
        if key.startswith(name + "_") and len(name) > len(best):
            best = name
    return priorities[best] if best else DEFAULT_PRIORITY


def events(
    changes: Sequence[tuple[str, str | None]],
    *,
    source: str,
    commit: int,
    targets: Sequence[str],
    priorities: Mapping[str, Priority] = DEFAULT_PRIORITIES,
) -> tuple[NewInput, ...]:
    """The ``event`` inputs telling each of ``targets`` about ``changes`` (``(key, JSON
    value or None: cleared)``, the last change of a key wins) made by thread ``source``
    in its commit ``commit`` (its first message seq). Dedup key: ``state:<source>:
    <commit>:<key>``."""
    latest = dict(changes)
    out: list[NewInput] = []
    for key, value in latest.items():
        shown = "cleared" if value is None else f"set to {value[:MAX_VALUE_CHARS]}"
        text = f"state change: this user's {key!r} was {shown} (in conversation {source})"
        priority = priority_of(key, priorities)
        for target in targets:
            out.append(
                NewInput(
                    thread_id=target,
                    kind="event",
                    dedup_key=f"state:{source}:{commit}:{key}",
                    content=text,
                    priority=priority,
                    source=source,
                )
            )
    return tuple(out)
