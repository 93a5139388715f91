"""BM25 over a scope's rows: FTS5's formula, phrases, documents without a match."""

from __future__ import annotations

import math

import pytest

from dormant.memory.bm25 import occurrences, scores


def test_occurrences_counts_consecutive_phrases_only() -> None:
    doc = ["out", "for", "delivery", "then", "out", "for", "delivery", "out"]
    assert occurrences(doc, ("out", "for", "delivery")) == 2
    assert occurrences(doc, ("for", "out")) == 0
    assert occurrences(doc, ()) == 0
    assert occurrences(["a"], ("a", "b")) == 0


def test_a_document_without_any_phrase_scores_none() -> None:
    out = scores([["parcel", "box"], ["green", "tea"], ["tea", "tea"]], [("tea",)])
    assert out[0] is None and out[1] is not None and out[2] is not None


def test_fts5_formula_rare_terms_and_repetition_weigh_more() -> None:
    docs = [["ship", "order"], ["order", "late"], ["order", "lost"], ["ship", "ship", "order"], ["x", "y"]]
    out = scores(docs, [("ship",), ("order",)])
    # "order" is in 4 of 5 docs: idf floored at 1e-6; "ship" in 2 of 5
    idf_ship = math.log((5 - 2 + 0.5) / (2 + 0.5))
    avgdl = sum(len(d) for d in docs) / 5
    norm = 1.2 * (1 - 0.75 + 0.75 * 2 / avgdl)
    assert out[0] == pytest.approx(idf_ship * 2.2 / (1 + norm) + 1e-6 * 2.2 / (1 + norm))
    assert out[3] is not None and out[0] is not None and out[3] > out[0] > (out[1] or 0.0)
    assert out[4] is None


def test_no_phrases_or_no_docs() -> None:
    assert scores([["a"]], []) == [None]
    assert scores([], [("a",)]) == []
