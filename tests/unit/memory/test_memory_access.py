"""Access counting off recall's path: batches written by a thread of their own, losses counted."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import pytest

from dormant.errors import StoreError
from dormant.memory.access import MAX_PENDING_BATCHES, AccessCounts


class Writes:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[tuple[str, float]], str]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.fail = False

    def __call__(self, tenant: str, accesses: Sequence[tuple[str, float]]) -> None:
        assert self.gate.wait(2)
        if self.fail:
            raise StoreError("disk full")
        self.calls.append((tenant, list(accesses), threading.current_thread().name))


def test_a_partial_batch_waits_for_flush_which_writes_it_in_the_callers_thread() -> None:
    writes = Writes()
    counts = AccessCounts(writes, batch=4)
    counts.add("", ["a", "b"], 1.0)
    counts.add("t1", ["c"], 2.0)
    assert writes.calls == []
    counts.flush()
    me = threading.current_thread().name
    assert writes.calls == [("", [("a", 1.0), ("b", 1.0)], me), ("t1", [("c", 2.0)], me)]


def test_a_full_batch_is_written_by_the_writer_thread_without_holding_the_recall() -> None:
    writes = Writes()
    writes.gate.clear()  # the store is slow
    counts = AccessCounts(writes, batch=2)
    counts.add("", ["a", "b"], 1.0)  # returns although the write cannot finish yet
    assert writes.calls == []
    writes.gate.set()
    counts.flush()
    assert [(t, a) for t, a, _ in writes.calls] == [("", [("a", 1.0), ("b", 1.0)])]
    assert writes.calls[0][2].startswith("dormant-touch")
    assert counts.dropped == 0


def test_a_failed_batch_is_logged_and_counted_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    writes = Writes()
    writes.fail = True
    counts = AccessCounts(writes, batch=2)
    with caplog.at_level(logging.ERROR, logger="dormant.memory"):
        counts.add("", ["a", "b", "c"], 1.0)
        counts.flush()
    assert counts.dropped == 3
    assert "memory_touch_failed" in caplog.text and "disk full" in caplog.text
    counts.add("", ["d"], 2.0)
    with pytest.raises(StoreError):  # what flush writes itself fails loudly
        counts.flush()


def test_batches_beyond_the_bound_are_dropped_not_queued(caplog: pytest.LogCaptureFixture) -> None:
    writes = Writes()
    writes.gate.clear()
    counts = AccessCounts(writes, batch=1)
    with caplog.at_level(logging.ERROR, logger="dormant.memory"):
        for i in range(MAX_PENDING_BATCHES + 3):
            counts.add("", [f"r{i}"], float(i))
    assert counts.dropped == 3 and "still waiting" in caplog.text
    writes.gate.set()
    counts.flush()
    assert len(writes.calls) == MAX_PENDING_BATCHES
