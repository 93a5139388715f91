"""Embedders: the deterministic hashing one, and the real MiniLM model (offline)."""

from __future__ import annotations

import math

import pytest

from dormant.memory.embedder import Embedder, HashingEmbedder, MiniLMEmbedder


def cos(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hashing_is_deterministic_unit_and_similar_for_similar_text() -> None:
    e = HashingEmbedder(128)
    assert isinstance(e, Embedder)
    a, b, c = e.embed(["my parcel was delivered", "my parcel was delivered late", "cats like fish"])
    assert e.embed(["my parcel was delivered"])[0] == a
    assert math.isclose(math.sqrt(cos(a, a)), 1.0)
    assert cos(a, b) > cos(a, c)
    assert e.embed([""])[0] == (0.0,) * 128


def test_minilm_loads_lazily_and_embeds_offline() -> None:
    e = MiniLMEmbedder(batch=2)
    assert not e.loaded
    texts = ["my order was dispatched", "has my parcel shipped?", "I love green tea", "tea"]
    vecs = e.embed(texts)
    assert e.loaded
    assert [len(v) for v in vecs] == [384] * 4
    assert cos(vecs[0], vecs[0]) == pytest.approx(1.0, abs=1e-5)
    assert cos(vecs[0], vecs[1]) > cos(vecs[0], vecs[2]) + 0.2
    # batching by length keeps the order and gives the same vector as alone
    assert cos(e.embed(["tea"])[0], vecs[3]) == pytest.approx(1.0, abs=1e-4)


def test_hashing_feature_cache_changes_no_vector_and_stays_bounded() -> None:
    from dormant.memory import embedder as emb

    text = "Order ORD-7 was dispatched " + "x" * 200  # one word longer than the cached features
    emb._feature_slot.cache_clear()
    first = emb.HashingEmbedder(64).embed([text])[0]
    cached = emb._feature_slot.cache_info()
    assert cached.currsize > 0 and cached.maxsize == emb.FEATURE_CACHE_ENTRIES
    again = emb.HashingEmbedder(64).embed([text])[0]
    assert emb._feature_slot.cache_info().hits >= cached.currsize
    vec = [0.0] * 64  # the uncached computation, feature by feature
    for feat in emb.HashingEmbedder(64)._features(text):
        slot, value = emb._slot(feat, 64)
        vec[slot] += value
    norm = sum(x * x for x in vec) ** 0.5
    assert first == again == tuple(x / norm for x in vec)
