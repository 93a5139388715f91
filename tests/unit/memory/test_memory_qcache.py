"""The query-embedding cache: bounded by entries and bytes, least recently used out."""

from __future__ import annotations

from dormant.memory.qcache import QueryCache


def test_bounded_by_entries_and_bytes_lru() -> None:
    c = QueryCache(max_entries=2, max_bytes=1 << 20)
    c.put("", True, "a", (1.0, 0.0))
    c.put("", True, "b", (0.0, 1.0))
    assert c.get("", True, "a") == (1.0, 0.0)  # a is now the most recent
    c.put("", True, "c", (0.5, 0.5))
    assert c.get("", True, "b") is None and c.get("", True, "a") is not None and len(c) == 2
    assert c.get("", False, "a") is None, "a vector pulled by the dictionary is another entry"
    assert c.get("t1", True, "a") is None, "per tenant"
    small = QueryCache(max_entries=100, max_bytes=3 * (4 * 384 + 96 + 2))
    for i in range(10):
        small.put("", True, f"{i}", tuple([0.1] * 384))
    assert len(small) == 3 and small.size_bytes <= small.max_bytes
    small.put("", True, "huge", tuple([0.1] * 10_000))
    assert small.get("", True, "huge") is None, "bigger than the whole bound: not kept"
    small.clear()
    assert len(small) == 0 and small.size_bytes == 0
    assert (c.hits, c.misses) == (2, 3)
