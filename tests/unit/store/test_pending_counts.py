"""The counts view loads made, waiting for their thread's commit: bounded, taken once."""

from __future__ import annotations

from dormant.store import views
from dormant.store.views import PendingCounts


def test_counts_are_taken_once_per_thread() -> None:
    pending = PendingCounts()
    pending.add("a", [("a", 1, 5), ("a", 2, 6)])
    pending.add("b", [])
    assert len(pending) == 2
    assert pending.take("b") == []
    assert pending.take("a") == [("a", 1, 5), ("a", 2, 6)]
    assert pending.take("a") == [] and len(pending) == 0


def test_a_new_load_replaces_the_threads_counts() -> None:
    pending = PendingCounts()
    pending.add("a", [("a", 1, 5)])
    pending.add("a", [("a", 2, 6)])
    assert len(pending) == 1 and pending.take("a") == [("a", 2, 6)]


def test_rows_and_threads_are_bounded_oldest_out() -> None:
    pending = PendingCounts()
    for n in range(views.MAX_PENDING_THREADS + 3):
        pending.add(f"t{n}", [(f"t{n}", 1, 1)])
    assert len(pending) == views.MAX_PENDING_THREADS
    assert pending.take("t0") == [] and pending.take(f"t{views.MAX_PENDING_THREADS + 2}") != []
    big = [("x", seq, 1) for seq in range(views.MAX_PENDING_COUNTS)]
    pending.add("x", big)
    assert len(pending) == views.MAX_PENDING_COUNTS and pending.take("x") == big
    pending.add("y", [*big, ("y", 0, 1)])
    assert len(pending) == views.MAX_PENDING_COUNTS
