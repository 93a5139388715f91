"""Pure ranking rules: filter, fusion, decay, importance, supersession."""

from __future__ import annotations

import pytest

from dormant.errors import InvalidInput
from dormant.memory.ranking import Candidate, FilterSpec, RankingPolicy, SupersessionRules, decay, rank
from dormant.memory.records import MemoryKind, MemoryRecord, NewMemory

KEY = "b1_" + "a" * 64
HOUR = 3600.0


def rec(
    rid: str, *, created: float = 0.0, kind: MemoryKind = "fact", importance: float = 0.5, **tags: str
) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        tenant="t",
        subject=KEY,
        kind=kind,
        text=rid,
        tags=dict(tags),
        importance=importance,
        created_at=created,
        valid_from=created,
    )


def test_decay_formula_and_the_issue_example() -> None:
    assert decay(0, 0.001) == 1.0
    assert decay(1000, 0.001) == pytest.approx(0.5)
    assert decay(-5, 0.001) == 1.0
    # at λ = 0.001, 2 hours old vs 2 days old: only 1.05x apart
    assert decay(2, 0.001) / decay(48, 0.001) == pytest.approx(1.046, abs=0.001)


def test_rrf_fuses_ranks_and_both_lists_beat_one() -> None:
    now = 10 * HOUR
    both = Candidate(rec("both"), text_rank=2, vector_rank=2)
    text = Candidate(rec("text"), text_rank=1)
    vec = Candidate(rec("vec"), vector_rank=1)
    out = rank([text, vec, both], RankingPolicy(use_decay=False), now=now, k=3)
    assert out[0].candidate.record.id == "both"
    assert out[0].score == pytest.approx(2 / 3)  # k = 1: 1/(1+2) from each list


def test_rrf_weights_each_list() -> None:
    text = Candidate(rec("text"), text_rank=1)
    vec = Candidate(rec("vec"), vector_rank=1)
    policy = RankingPolicy(use_decay=False, text_weight=0.75, vector_weight=0.25)
    out = {s.candidate.record.id: s.score for s in rank([text, vec], policy, now=0, k=2)}
    assert out == {"text": pytest.approx(1.5 / 2), "vec": pytest.approx(0.5 / 2)}


def test_weighted_fusion_normalizes_text_scores() -> None:
    policy = RankingPolicy(fusion="weighted", use_decay=False, text_weight=0.5, vector_weight=0.5)
    a = Candidate(rec("a"), text_rank=1, text_score=9.0, vector_rank=2, vector_sim=0.2)
    b = Candidate(rec("b"), text_rank=2, text_score=3.0, vector_rank=1, vector_sim=0.9)
    out = {s.candidate.record.id: s.score for s in rank([a, b], policy, now=0, k=2)}
    assert out["a"] == pytest.approx(0.5 * 1.0 + 0.5 * 0.2)
    assert out["b"] == pytest.approx(0.5 * 0.0 + 0.5 * 0.9)


def test_decay_from_created_or_access() -> None:
    old = MemoryRecord(
        id="x", tenant="t", subject=KEY, kind="fact", text="x", created_at=0, last_access_at=99 * HOUR
    )
    assert RankingPolicy().age_hours(old, 100 * HOUR) == pytest.approx(100)
    assert RankingPolicy(decay_from="access").age_hours(old, 100 * HOUR) == pytest.approx(1)


def test_decay_and_importance_order_equal_relevance() -> None:
    now = 1000 * HOUR
    new = Candidate(rec("new", created=now - HOUR), text_rank=1)
    old = Candidate(rec("old", created=0), text_rank=1)
    vip = Candidate(rec("vip", created=0, importance=1.0), text_rank=1)
    policy = RankingPolicy(lambdas={"fact": 0.01})
    order = [s.candidate.record.id for s in rank([old, vip, new], policy, now=now, k=3)]
    assert order == ["new", "vip", "old"]


def test_structure_only_candidates_rank_by_recency() -> None:
    cands = [Candidate(rec(f"r{i}", created=i * HOUR)) for i in range(5)]
    out = rank(cands, RankingPolicy(importance_weight=0.0), now=10 * HOUR, k=3)
    assert [s.candidate.record.id for s in out] == ["r4", "r3", "r2"]


def test_filter_spec_admits() -> None:
    r = MemoryRecord(
        id="x",
        tenant="t",
        subject=KEY,
        kind="event",
        text="x",
        tags={"sev": 3, "type": "complaint"},
        valid_from=10,
        invalid_at=20,
    )
    assert FilterSpec(kinds=frozenset({"event"}), tags={"sev": 3}, at=15).admits(r, now=100)
    assert not FilterSpec(tags={"sev": "3"}).admits(r, now=15)  # typed
    assert not FilterSpec().admits(r, now=25)  # superseded
    assert FilterSpec(history=True).admits(r, now=25)
    with pytest.raises(InvalidInput):
        FilterSpec(kinds=frozenset({"gossip"}))  # type: ignore[arg-type]
    with pytest.raises(InvalidInput):
        FilterSpec(tags={"$.x') OR 1": 1})


def test_supersession_by_key_tag_and_protection() -> None:
    rules = SupersessionRules()
    old = rec("addr1", key="shipping_address")
    assert rules.supersedes(
        old, NewMemory(subject=KEY, kind="fact", text="y", tags={"key": "shipping_address"})
    )
    assert not rules.supersedes(old, NewMemory(subject=KEY, kind="fact", text="y", tags={"key": "billing"}))
    assert not rules.supersedes(
        old, NewMemory(subject=KEY, kind="preference", text="y", tags={"key": "shipping_address"})
    )
    complaint = rec("c", key="order:1", type="complaint")
    inquiry = NewMemory(subject=KEY, kind="fact", text="y", tags={"key": "order:1", "type": "inquiry"})
    assert not rules.supersedes(complaint, inquiry)
    resolution = NewMemory(subject=KEY, kind="fact", text="y", tags={"key": "order:1", "type": "resolution"})
    assert rules.supersedes(complaint, resolution)
    # events are history: never superseded by key, only explicitly
    ev = rec("e", kind="event", key="k")
    assert not rules.supersedes(ev, NewMemory(subject=KEY, kind="event", text="y", tags={"key": "k"}))
    assert rules.supersedes(ev, NewMemory(subject=KEY, kind="event", text="y", replaces=("e",)))
    # typed: key=1 and key="1" are different keys
    assert rules.key_of("fact", {"key": 1}) != rules.key_of("fact", {"key": "1"})
