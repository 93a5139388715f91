"""The view cache's spill file: views evicted from RAM come back decoded, never stale."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dormant.records import Message, Thread, ViewLimits
from dormant.view.builder import view_usage
from dormant.view.cache import ViewCache
from dormant.view.spill import MAX_SEGMENTS, MAX_SKIP, ViewSpill

LIMITS = ViewLimits()


def view(n: int, size: int = 200) -> tuple[Message, ...]:
    return tuple(Message(seq=i, role="user", content=f"{i}" + "x" * size) for i in range(1, n + 1))


def row(thread_id: str, last_seq: int, born: float = 1.0) -> Thread:
    return Thread(id=thread_id, agent="a", last_seq=last_seq, created_at=born)


def usage(v: tuple[Message, ...]) -> tuple[int, int]:
    return view_usage(v, LIMITS.counts_tokens)


def test_a_spilled_view_comes_back_only_for_the_row_it_was_current_at(tmp_path: Path) -> None:
    spill = ViewSpill(1 << 20, directory=str(tmp_path))
    v = view(5)
    spill.put("t", (1.0, 5, 0, LIMITS, 0, usage(v)), v, None)
    assert os.listdir(tmp_path) == [], "the file has no name: it goes with the process"
    assert spill.get("t", 1.0, 5, 0, LIMITS) == (v, None, 0, usage(v))
    assert spill.get("t", 1.0, 5, 0, ViewLimits(max_messages=3)) is None, "other limits"
    assert spill.get("t", 1.0, 5, 0, LIMITS) is None, "a stale lookup dropped it"
    spill.put("t", (1.0, 5, 0, LIMITS, 0, usage(v)), v, None)
    assert spill.get("t", 2.0, 5, 0, LIMITS) is None, "another incarnation of the thread"
    spill.put("t", (1.0, 5, 0, LIMITS, 0, usage(v)), v, None)
    assert spill.get("t", 1.0, 6, 0, LIMITS) is None, "the thread moved on"
    spill.put("t", (1.0, 5, 0, LIMITS, 0, usage(v)), v, None)
    assert spill.get("t", 1.0, 5, 5, LIMITS) is None, "it was summarized since"
    assert spill.hits == 1
    spill.close()


def test_the_ring_drops_what_it_overwrote() -> None:
    v = view(4, size=1000)  # ~4 KB encoded
    spill = ViewSpill(64 * 1024)
    for i in range(40):
        spill.put(f"t{i}", (1.0, 4, 0, LIMITS, 0, usage(v)), v, None)
    assert 10 <= len(spill) <= 16, "about the ring's size in views"
    assert spill.get("t0", 1.0, 4, 0, LIMITS) is None, "overwritten long ago"
    assert spill.get("t39", 1.0, 4, 0, LIMITS) == (v, None, 0, usage(v))
    big = view(40, size=1000)  # over 1/8 of the ring: not spilled
    spill.put("big", (1.0, 40, 0, LIMITS, 0, usage(big)), big, None)
    assert spill.get("big", 1.0, 40, 0, LIMITS) is None
    spill.close()


def test_an_io_error_turns_spilling_off(monkeypatch: pytest.MonkeyPatch) -> None:
    spill = ViewSpill(1 << 20)
    v = view(3)

    def broken(*args: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", broken)
    spill.put("t", (1.0, 3, 0, LIMITS, 0, usage(v)), v, None)
    assert not spill.enabled and len(spill) == 0
    monkeypatch.undo()
    spill.put("t", (1.0, 3, 0, LIMITS, 0, usage(v)), v, None)
    assert spill.get("t", 1.0, 3, 0, LIMITS) is None


def test_a_view_evicted_from_ram_is_served_from_the_spill_file() -> None:
    cache = ViewCache(max_bytes=10**9, max_entries=1, spill_bytes=1 << 20)
    a, b = view(3), view(2)
    cache.put(row("a", 3), LIMITS, a)
    cache.put(row("b", 2), LIMITS, b)  # evicts a to the spill file
    assert len(cache) == 1 and cache.spill.writes == 1
    assert cache.lookup(row("a", 3), LIMITS) == (a, None, 0, usage(a))
    assert cache.stats().spill_hits == 1 and cache.misses == 1
    assert cache.lookup(row("a", 4), LIMITS) is None, "never a stale view"
    cache.close()


def test_a_refused_view_is_spilled_extended_by_its_slices_commit() -> None:
    # scan resistance keeps a recently evicted thread out of a full cache; with the
    # spill file on, its slice's commit writes the extended view there, so the thread's
    # next slice decodes it instead of rebuilding it
    for spill_bytes in (0, 1 << 20):
        cache = ViewCache(max_bytes=10**9, max_entries=1, spill_bytes=spill_bytes)
        first = view(3)
        cache.put(row("a", 3), LIMITS, first)
        cache.put(row("b", 1), LIMITS, view(1))  # a evicted (and spilled, when on)
        assert cache.lookup(row("a", 3), LIMITS) == (
            None if not spill_bytes else (first, None, 0, usage(first))
        )
        if not spill_bytes:
            cache.put(row("a", 3), LIMITS, first)  # the rebuilt view: refused
        assert len(cache) == 1 and "a" not in {t for t in cache._entries}, "a is kept out of RAM"
        new = (Message(seq=4, role="assistant", content="done"),)
        cache.advance("a", new)
        found = cache.lookup(row("a", 4), LIMITS)
        if spill_bytes:
            assert found is not None and found[0] == first + new
        else:
            assert found is None
        cache.close()


def test_discarding_a_thread_forgets_its_spilled_view() -> None:
    cache = ViewCache(max_bytes=10**9, max_entries=1, spill_bytes=1 << 20)
    cache.put(row("a", 3), LIMITS, view(3))
    cache.put(row("b", 1), LIMITS, view(1))
    cache.discard("a")
    assert cache.lookup(row("a", 3), LIMITS) is None
    cache.close()


def meta(last_seq: int, v: tuple[Message, ...]) -> tuple[float, int, int, ViewLimits, int, tuple[int, int]]:
    return (1.0, last_seq, 0, LIMITS, 0, usage(v))


def test_a_kept_view_is_extended_by_writing_only_the_new_messages() -> None:
    spill = ViewSpill(1 << 20)
    v = view(6, size=1000)
    spill.put("t", meta(6, v), v, None)
    whole = spill.bytes_written
    for last in range(7, 7 + MAX_SEGMENTS - 1):
        added = (Message(seq=last, role="assistant", content=f"reply {last}"),)
        current = (1.0, last - 1, 0, LIMITS)
        assert spill.extend("t", current, meta(last, v[2:] + added), added, 1)
        v = v[1:] + added  # one message left the view's start, one joined its end
        found = spill.get("t", 1.0, last, 0, LIMITS)
        assert found is not None and found[0] == v, "the chain reads back as the view"
    assert spill.bytes_written - whole < whole, "each extension wrote its message, not the view"
    full = (Message(seq=99, role="user", content="x"),)
    assert not spill.extend("t", (1.0, 6 + MAX_SEGMENTS - 1, 0, LIMITS), meta(99, v), full, 0), "chain full"
    spill.close()


def test_an_extension_is_refused_when_stale_or_dropping_too_much() -> None:
    spill = ViewSpill(1 << 20)
    v = view(4)
    spill.put("t", meta(4, v), v, None)
    added = (Message(seq=5, role="user", content="x"),)
    assert not spill.extend("t", (1.0, 3, 0, LIMITS), meta(5, v), added, 0), "not current at that row"
    assert not spill.extend("u", (1.0, 4, 0, LIMITS), meta(5, v), added, 0), "nothing kept"
    assert not spill.extend("t", (1.0, 4, 0, LIMITS), meta(5, v), added, MAX_SKIP + 1), "too much skipped"
    assert spill.get("t", 1.0, 4, 0, LIMITS) is not None, "a refused extension leaves the view as it was"
    spill.close()


def test_an_extension_that_outlives_its_chains_start_in_the_ring_drops_it() -> None:
    spill = ViewSpill(64 * 1024)
    v = view(4, size=1000)
    spill.put("t", meta(4, v), v, None)
    for i in range(20):  # other views overwrite the ring, t's base among them
        spill.put(f"o{i}", meta(4, v), v, None)
    added = (Message(seq=5, role="user", content="x"),)
    assert not spill.extend("t", (1.0, 4, 0, LIMITS), meta(5, v), added, 0)
    assert spill.get("t", 1.0, 5, 0, LIMITS) is None
    spill.close()


def test_the_index_is_bounded_in_bytes() -> None:
    spill = ViewSpill(1 << 24, max_index_bytes=64 * 1024)
    v = view(1, size=10)
    for i in range(2000):
        spill.put(f"thread-{i}", meta(1, v), v, None)
        assert spill.index_bytes <= 64 * 1024
    assert 64 <= len(spill) < 2000, "the newest views stay, as many as the budget holds"
    assert spill.get("thread-1999", 1.0, 1, 0, LIMITS) is not None
    spill.close()
    assert spill.index_bytes == 0


def test_a_refused_views_later_commits_append_to_its_spilled_chain() -> None:
    cache = ViewCache(max_bytes=10**9, max_entries=1, spill_bytes=1 << 20)
    first = view(8, size=2000)
    cache.put(row("a", 8), LIMITS, first)
    cache.put(row("b", 1), LIMITS, view(1))  # a evicted to the spill file, whole
    expected, seq = first, 8
    for _ in range(3):  # each slice of a: a miss served by the spill file, kept out of RAM
        assert cache.lookup(row("a", seq), LIMITS) is not None
        assert "a" not in cache._entries
        written = cache.spill.bytes_written
        new = (Message(seq=seq + 1, role="user", content="next"),)
        cache.advance("a", new)
        seq += 1
        expected += new
        assert cache.spill.bytes_written - written < 200, "only the new message was written"
    found = cache.lookup(row("a", seq), LIMITS)
    assert found is not None and found[0] == expected
    cache.close()


def test_a_chain_is_written_whole_when_extending_counted_the_views_own_messages() -> None:
    # limits that count: the new message makes the byte bounds pass the token budget, so
    # extending counts the view's uncounted messages exactly; the chain's copies of them
    # are uncounted, so it must not just take the new message
    limits = ViewLimits(max_tokens=120)
    assert limits.counts_tokens
    cache = ViewCache(max_bytes=10**9, max_entries=1, spill_bytes=1 << 20)
    old = tuple(Message(seq=i, role="user", content="hello there " * 3) for i in (1, 2))
    cache.put(row("a", 2), limits, old)
    cache.put(row("b", 1), limits, view(1))  # a evicted to the spill file
    assert cache.lookup(row("a", 2), limits) is not None and "a" not in cache._entries
    cache.advance("a", (Message(seq=3, role="assistant", content="a longer reply " * 5),))
    found = cache.lookup(row("a", 3), limits)
    assert found is not None
    got, _, _, got_usage = found
    assert [m.seq for m in got] == [1, 2, 3] and all(m.tokens for m in got), "counted while extending"
    assert got_usage == view_usage(got, counting=True), "the usage kept is the view's own"
    cache.close()
