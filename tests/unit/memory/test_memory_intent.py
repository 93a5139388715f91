# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""The intent recogniser (English and Chinese), structure-first ordering, supersession by
time, embedder names and CJK dictionary terms inside sentences: pure, no store."""

from __future__ import annotations

import pytest

from dormant.errors import UsageError
from dormant.memory import Dictionary, HashingEmbedder, MemoryRecord
from dormant.memory.embedder import MiniLMEmbedder, resolve_embedder
from dormant.memory.intent import (
    DEFAULT_VOCABULARY,
    TOPICS,
    mentions,
    read_intent,
    structural_match,
)
from dormant.memory.ranking import Candidate, RankingPolicy, rank
from dormant.memory.structure import order

DAY = 86_400.0


def names(query: str) -> set[str]:
    return {t.name for t in read_intent(query).topics}


@pytest.mark.parametrize(
    ("query", "topics", "latest"),
    [
        ("Which city should the parcel go to?", {"address"}, False),
        ("What is the customer's current address?", {"address"}, True),
        ("What was the most recent complaint?", {"complaint"}, True),
        ("How does the customer want us to get in touch?", {"contact"}, False),
        ("What did the customer phone us about most recently?", {"call"}, True),
        ("Has my order ORD-7 been shipped yet?", {"order"}, False),
        ("Was the kettle packed?", set(), False),
        ("包裹应该寄到哪个城市？", {"address"}, False),
        ("客户现在的地址是什么？", {"address"}, True),
        ("客户最近一次投诉是什么？", {"complaint"}, True),
        ("最新的联系方式是什么？", {"contact"}, True),
        ("客户上次来电是关于什么？", {"call"}, True),
        ("客户申请过退款吗？", {"refund"}, False),
        ("", set(), False),
    ],
)
def test_topics_and_latest_in_english_and_chinese(query: str, topics: set[str], latest: bool) -> None:
    intent = read_intent(query)
    assert {t.name for t in intent.topics} == topics
    assert intent.latest is latest


def test_periods_and_whole_words() -> None:
    assert read_intent("Any complaint last week?").period_days == 14
    assert read_intent("上周有投诉吗？").period_days == 14
    assert read_intent("What happened this month?").period_days == 31
    assert read_intent("Any complaint?").period_days is None
    assert not mentions("the recalled record", "call"), "whole words outside CJK"
    assert mentions("客户来电说", "来电"), "a substring in CJK"
    assert not read_intent("the callback was fine").topics


def test_the_dictionary_extends_the_topics() -> None:
    assert "complaint" not in names("物流异常吗？")
    vocab = DEFAULT_VOCABULARY.extended([["物流异常", "快递停滞", "投诉"], ["a", "b"]])
    assert {t.name for t in read_intent("有物流异常吗？", vocab).topics} == {"complaint"}
    topic = next(t for t in vocab.topics if t.name == "complaint")
    assert "快递停滞" in topic.tags and vocab.topics[0] is TOPICS[0]


def rec(rid: str, *, at: float, kind: str = "fact", text: str = "x", **tags: str) -> MemoryRecord:
    return MemoryRecord(
        id=rid,
        tenant="",
        subject="s",
        kind=kind,  # type: ignore[arg-type]
        text=text,
        tags=dict(tags),
        created_at=at,
        valid_from=at,
    )


def test_structural_match_by_key_tag_type_tag_and_text() -> None:
    address, complaint = TOPICS[0], TOPICS[3]
    assert structural_match(rec("a", at=1, key="shipping_address"), address)
    assert structural_match(rec("b", at=1, key="地址"), address)
    assert not structural_match(rec("c", at=1, key="language"), address)
    assert not structural_match(rec("d", at=1, text="my address is secret"), address), "keyed needs a key tag"
    assert structural_match(rec("e", at=1, kind="event", type="complaint"), complaint)
    assert structural_match(rec("f", at=1, kind="event", text="客户投诉了包裹"), complaint)
    assert structural_match(rec("g", at=1, key="order:1", type="complaint"), complaint)
    assert not structural_match(rec("h", at=1, key="order:1", text="complaint"), complaint)


def test_structure_first_then_hybrid_order() -> None:
    policy = RankingPolicy()
    cands = [
        Candidate(rec("noise", at=9 * DAY, kind="event", text="which city fair"), text_rank=1),
        Candidate(rec("addr", at=1 * DAY, key="shipping_address"), text_rank=None, vector_rank=3),
        Candidate(rec("c_old", at=2 * DAY, kind="event", type="complaint"), text_rank=2),
        Candidate(rec("c_new", at=5 * DAY, kind="event", type="complaint"), text_rank=4),
    ]
    scored = rank(cands, policy, now=10 * DAY, k=len(cands))
    got = order(scored, read_intent("Which city should the parcel go to?"), ref=10 * DAY, k=3)
    assert [s.candidate.record.id for s, _ in got][:2] == ["addr", "noise"]
    assert got[0][1].startswith("current value of key shipping_address") and got[1][1] == ""
    got = order(scored, read_intent("the most recent complaint"), ref=10 * DAY, k=4)
    assert [s.candidate.record.id for s, _ in got][:2] == ["c_new", "c_old"]
    week = order(scored, read_intent("any complaint this week?"), ref=10 * DAY, k=4)
    assert [s.candidate.record.id for s, why in week if why] == ["c_new"]
    plain = order(scored, read_intent("tell me about it"), ref=10 * DAY, k=4)
    assert [s.candidate.record.id for s, _ in plain] == [s.candidate.record.id for s in scored]
    extra = rank([Candidate(rec("addr2", at=1, key="address"))], policy, now=10 * DAY, k=1)
    only = order(scored[:1], read_intent("tell me"), ref=10 * DAY, k=4, extra=extra)
    assert [s.candidate.record.id for s, _ in only] == ["noise"], "extra never joins the hybrid tier"


def test_embedder_names() -> None:
    assert resolve_embedder("none") is None
    assert isinstance(resolve_embedder("hashing"), HashingEmbedder)
    assert isinstance(resolve_embedder("minilm"), MiniLMEmbedder)
    assert isinstance(resolve_embedder(None), MiniLMEmbedder), "None is the default, MiniLM"
    emb = HashingEmbedder(16)
    assert resolve_embedder(emb) is emb
    with pytest.raises(UsageError, match="unknown embedder"):
        resolve_embedder("bert")


def test_cjk_dictionary_terms_match_inside_a_sentence() -> None:
    d = Dictionary([["物流异常", "快递停滞", "派送超时"], ["shipped", "dispatched"]])
    assert d.expand("客户有没有反映过物流异常？") == [["物流异常", "快递停滞", "派送超时"]]
    assert d.matches("包裹快递停滞了") == [0]
    assert d.matches("has it shipped") == [1]
    assert d.matches("unshipped") == [] and d.matches("物流很好") == []


def test_chinese_query_terms_split_at_latin_and_drop_question_bigrams() -> None:
    from dormant.memory.fulltext import query_terms, words

    assert words("订单ORD-000001发货了吗？") == ["订单", "ord", "000001", "发货了吗"]
    terms = query_terms("客户有没有反映过派送超时？")
    assert "有没" not in terms and "没有" not in terms and {"反映", "派送", "超时"} <= set(terms)


def test_mostly_cjk_and_which_embedders_read_it() -> None:
    from dormant.memory.fulltext import mostly_cjk

    assert mostly_cjk("订单ORD-000001发货了吗？") and mostly_cjk("包裹应该寄到哪个城市？")
    assert not mostly_cjk("Was order 订单 shipped?") and not mostly_cjk("")
    assert MiniLMEmbedder.reads_cjk is False
    assert getattr(HashingEmbedder(16), "reads_cjk", True)
