"""A bounded cache of query embeddings (thread-safe; bounded by entries and by bytes).

A slice recalls for its inputs' text, and the same text is often recalled again (a
retry, a second slice on the same input, a tool's recall of the question): the
query's forward pass is most of a recall's time with a model embedder, so the
vector is kept, by (tenant, whether the dictionary pulled it, text), as float32.
Saving a tenant's dictionary clears the cache (pulled vectors depend on it).
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict

Vector = tuple[float, ...]
#: defaults: 4,096 vectors, at most 8 MiB (a 384-d vector is 1.5 KiB as float32)
MAX_ENTRIES = 4096
MAX_BYTES = 8 << 20


class QueryCache:
    """Least-recently-used query vectors, at most ``max_entries`` and ``max_bytes``."""

    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[str, bool, str], array[float]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _size(key: tuple[str, bool, str], vec: array[float]) -> int:
        return vec.itemsize * len(vec) + len(key[0]) + 2 * len(key[2]) + 96

    def get(self, tenant: str, pulled: bool, text: str) -> Vector | None:
        """The cached vector, or None (counted as a miss)."""
        key = (tenant, pulled, text)
        with self._lock:
            vec = self._items.get(key)
            if vec is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return tuple(vec)

    def put(self, tenant: str, pulled: bool, text: str, vector: Vector) -> None:
        """Keep ``vector`` (evicting the least recently used beyond the bounds)."""
        key = (tenant, pulled, text)
        vec = array("f", vector)
        size = self._size(key, vec)
        if size > self.max_bytes or self.max_entries <= 0:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= self._size(key, old)
            self._items[key] = vec
            self._bytes += size
            while len(self._items) > self.max_entries or self._bytes > self.max_bytes:
                k, v = self._items.popitem(last=False)
                self._bytes -= self._size(k, v)

    def clear(self) -> None:
        """Drop every vector."""
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def size_bytes(self) -> int:
        """Bytes held, roughly."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)
