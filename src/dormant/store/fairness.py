"""Which ready threads a claim takes when several tenants have ready work: the rule, pure.

Slices are shared out evenly between the tenants with ready work. A tenant's k-th best
claimable thread (by ready key: priority, then age) stands at **place** ``n + k``, ``n``
being the live leases its tenant holds already (on any worker); a claim of ``limit``
takes the best places, the ready key breaking ties, and none past ``cap`` (the most
leases one tenant may hold at once; 0: no cap). So the next free slot goes to the tenant
running the fewest slices, one tenant's backlog (however old: aging lets an old P2 key
beat a fresh P0's) never stands in front of another tenant's next thread, and with a
single tenant the order is the ready-key order.

The SQLite backend applies :func:`pick` to what it read in its claim transaction; the
PostgreSQL claim is one statement computing the same places in SQL (``CLAIM_THREADS``
in ``store/postgres/sql.py``). The contract tests hold both to this rule.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def room(held: int, limit: int, cap: int) -> int:
    """How many threads a tenant holding ``held`` leases may get from a claim of ``limit``."""
    return limit if cap <= 0 else max(0, min(limit, cap - held))


def pick(
    candidates: Mapping[str, Sequence[tuple[str, float]]],
    held: Mapping[str, int],
    limit: int,
    cap: int = 0,
) -> list[str]:
    """The ids a claim of ``limit`` takes.

    ``candidates`` maps each tenant to its best claimable threads, ``(id, ready key)``
    best first (at least :func:`room` of them when it has that many); ``held`` maps a
    tenant to the live leases it holds (missing: none).
    """
    placed: list[tuple[int, float, str]] = []
    for tenant, threads in candidates.items():
        already = held.get(tenant, 0)
        for rank, (thread_id, key) in enumerate(threads[: room(already, limit, cap)], start=1):
            placed.append((already + rank, key, thread_id))
    return [thread_id for _, _, thread_id in heapq.nsmallest(limit, placed)]
