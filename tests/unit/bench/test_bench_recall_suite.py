"""The recall benchmark's suite (seeded, ground truth consistent) and its grading."""

from __future__ import annotations

import pytest

from dormant.bench.recall_eval import grade, percentile
from dormant.bench.recall_suite import DICTIONARY, SuiteQuery, build_suite


def test_suite_is_seeded_and_its_ground_truth_is_consistent() -> None:
    a, b = build_suite(subjects=200, rich=30, seed=3), build_suite(subjects=200, rich=30, seed=3)
    assert a.records == b.records and a.queries == b.queries
    assert build_suite(subjects=200, rich=30, seed=4).records != a.records
    assert len(set(a.subjects)) == 200 and a.shared_phone_pairs == 3
    for q in a.queries:
        assert q.truth and not (q.truth & q.stale)
        assert all(a.records[i].subject == q.subject for i in q.truth | q.stale)
        if q.at is not None:  # a past query's truth was valid then
            assert all(a.records[i].at <= q.at for i in q.truth)
    synonyms = {t for g in DICTIONARY for t in g}
    shipped = [q for q in a.queries if q.category == "shipped_synonym"]
    # the query says "shipped", the record "dispatched": only the dictionary joins them
    assert shipped and all(
        "shipped" in q.text and "shipped" not in a.records[next(iter(q.truth))].text for q in shipped
    )
    assert "dispatched" in synonyms


def test_grade() -> None:
    q1 = SuiteQuery("s1", "c", "q", frozenset({0}), stale=frozenset({1}))
    q2 = SuiteQuery("s2", "c", "q", frozenset({2}))
    ids = ["a", "b", "c"]
    g = grade([(q1, ["x", "a", "b"], ["s1", "s1", "s1"]), (q2, ["y", "z"], ["s2", "s1"])], ids)
    assert g["recall_at_1"] == 0.0
    assert g["recall_at_5"] == 0.5
    assert g["mrr"] == pytest.approx(0.25)
    assert g["stale_rate"] == 1.0  # the one query with a superseded version returned it
    assert g["leak_rate"] == 0.5


def test_percentile() -> None:
    assert percentile([], 50) == 0.0
    assert percentile([float(i) for i in range(1, 101)], 99) == 99.0
    assert percentile([5.0], 50) == 5.0


def test_chinese_suite_is_seeded_consistent_and_needs_the_dictionary() -> None:
    from dormant.bench.recall_suite_zh import DICTIONARY_ZH, build_suite_zh

    a = build_suite_zh(subjects=100, rich=30, seed=3)
    assert a.records == build_suite_zh(subjects=100, rich=30, seed=3).records
    kinds = {q.category for q in a.queries}
    assert {"current_city", "latest_complaint", "complaint_synonym", "shipped_synonym"} <= kinds
    for q in a.queries:
        assert q.truth and not (q.truth & q.stale)
        assert all(a.records[i].subject == q.subject for i in q.truth | q.stale)
    for q in a.queries:
        if q.category == "shipped_synonym":  # 发货 in the question, 寄出 in the record
            assert "发货" in q.text and "发货" not in a.records[next(iter(q.truth))].text
    assert ["发货", "寄出", "发出"] in DICTIONARY_ZH
