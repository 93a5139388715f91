# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""Memory time on every store backend: versions of a key supersede in ``valid_from`` order
(out-of-order adds, ``recall(at=)``), a repeat refreshes when it was observed, structure
answers "what is true now" first, text-only recall falls back to structure and recency,
Chinese in full text and the dictionary."""

from __future__ import annotations

import pytest

from dormant.errors import InvalidInput
from dormant.memory import MemoryCore, NewMemory, RecallMode
from tests.contract.test_memory_store import ALICE, T, add, core, opened

__all__ = ["core", "opened"]  # the fixtures, used by name

ADDR = {"key": "shipping_address"}
TEXT_ONLY = RecallMode(vector=False)


def ids(core: MemoryCore, query: str, **kw: object) -> list[str]:
    return [h.record.id for h in core.recall(T, [ALICE], query, now=10_000.0, **kw).hits]  # type: ignore[arg-type]


def test_an_older_version_added_later_is_history_and_never_invalidates_the_newer(core: MemoryCore) -> None:
    new = add(core, ALICE, "Ship to 44 Pine Road, Dover", tags=ADDR, valid_from=3000.0, now=3000.0)
    old = add(core, ALICE, "Ship to 12 Oak Street, Milton", tags=ADDR, valid_from=1000.0, now=4000.0)
    assert core.get(T, [ALICE], new).invalid_at is None
    assert core.get(T, [ALICE], old).invalid_at == 3000.0
    assert ids(core, "ship") == [new]
    assert ids(core, "ship", at=2000.0) == [old]
    # a version between the two: it ends the old one and is ended by the new one
    mid = add(core, ALICE, "Ship to 9 Mill Lane, Kingston", tags=ADDR, valid_from=2000.0, now=5000.0)
    assert core.get(T, [ALICE], old).invalid_at == 2000.0
    assert core.get(T, [ALICE], mid).invalid_at == 3000.0
    assert ids(core, "ship", at=1500.0) == [old]
    assert ids(core, "ship", at=2500.0) == [mid]
    assert ids(core, "ship", at=3500.0) == [new]


def test_valid_from_and_observed_at_differ_and_a_repeat_refreshes_observed(core: MemoryCore) -> None:
    rec = core.add(
        T,
        NewMemory(
            subject=ALICE, text="Prefers email", kind="preference", valid_from=500.0, observed_at=900.0
        ),
        now=1000.0,
    ).record
    assert (rec.valid_from, rec.created_at) == (500.0, 900.0)
    again = core.add(T, NewMemory(subject=ALICE, text="prefers  EMAIL", kind="preference"), now=8000.0)
    assert again.duplicate and again.record.id == rec.id and again.record.created_at == 8000.0
    assert core.get(T, [ALICE], rec.id).created_at == 8000.0
    older = core.add(T, NewMemory(subject=ALICE, text="Prefers email", kind="preference"), now=100.0)
    assert core.get(T, [ALICE], older.record.id).created_at == 8000.0, "a repeat never makes it older"


def test_a_key_tag_on_an_event_is_refused_and_nothing_written(core: MemoryCore) -> None:
    with pytest.raises(InvalidInput, match="key tag"):
        core.add(T, NewMemory(subject=ALICE, text="Called", kind="event", tags={"key": "call"}), now=1.0)
    assert core.list(T, [ALICE]).items == ()


def test_current_value_and_newest_event_rank_first(core: MemoryCore) -> None:
    add(core, ALICE, "Please ship my orders to 12 Oak Street, Dover.", tags=ADDR, now=1000.0)
    current = add(
        core, ALICE, "I moved house; my new delivery address is 9 Mill Lane, Kingston.", tags=ADDR, now=2000.0
    )
    for i in range(6):  # records that share the question's words but answer nothing
        add(core, ALICE, f"Asked which city hosts the parcel fair number {i}.", kind="event", now=3000.0 + i)
    old_c = add(
        core, ALICE, "Complaint: the kettle arrived damaged.", kind="event", tags={"type": "complaint"}
    )
    new_c = add(
        core,
        ALICE,
        "Complaint: the lamp was missing a part.",
        kind="event",
        tags={"type": "complaint"},
        now=5000.0,
    )
    add(core, ALICE, "Complaint about complaints: the complaint form is long.", kind="event", now=900.0)
    assert ids(core, "Which city should the parcel go to?")[0] == current
    assert ids(core, "Which city should the parcel go to?", mode=TEXT_ONLY)[0] == current
    assert ids(core, "What was the most recent complaint?")[0] == new_c
    assert old_c in ids(core, "What was the most recent complaint?")
    off = RecallMode(structure=False)
    assert ids(core, "Which city should the parcel go to?", mode=off)[0] != current
    hit = core.recall(T, [ALICE], "What is the current address?", now=10_000.0, explain=True).hits[0]
    assert hit.record.id == current and hit.explain is not None
    assert hit.explain["tier"] == 0 and "shipping_address" in str(hit.explain["structure"])
    assert "address" in str(hit.explain["intent"]) and "latest" in str(hit.explain["intent"])


def test_text_only_recall_answers_when_no_word_matches(core: MemoryCore) -> None:
    newest = add(core, ALICE, "Likes green tea", kind="preference", now=2000.0)
    add(core, ALICE, "Has a dog", now=1000.0)
    got = core.recall(T, [ALICE], "zebra xylophone", now=10_000.0, mode=TEXT_ONLY)
    assert got.hits[0].record.id == newest and len(got.hits) == 2
    assert ids(core, "zebra", mode=RecallMode(vector=False, structure=False)) == []


def test_chinese_full_text_dictionary_and_intent(core: MemoryCore) -> None:
    core.save_dictionary(T, [["物流异常", "快递停滞", "派送超时"], ["发货", "寄出"]])
    add(core, ALICE, "我的收货地址是杭州市西湖区文三路88号。", tags=ADDR, now=1000.0)
    moved = add(core, ALICE, "我搬到了厦门，新地址是思明区湖滨南路12号。", tags=ADDR, now=2000.0)
    stuck = add(core, ALICE, "客户反映订单ORD-9的快递停滞了三天。", kind="event", now=3000.0)
    add(core, ALICE, "客户说天气很好。", kind="event", now=4000.0)
    # the synonym inside a sentence with no spaces: the dictionary fires
    assert ids(core, "客户有没有反映过物流异常？", mode=TEXT_ONLY)[0] == stuck
    assert ids(core, "这单有物流异常吗", mode=RecallMode(vector=False, structure=False)) == [stuck]
    # "which city should the parcel go to?": no shared word, answered by structure
    assert ids(core, "包裹应该寄到哪个城市？", mode=TEXT_ONLY)[0] == moved
    assert ids(core, "客户现在的地址是什么？")[0] == moved
    assert core.dictionary_groups(T) == [["物流异常", "快递停滞", "派送超时"], ["发货", "寄出"]]


def test_a_recalled_query_is_embedded_once_until_the_dictionary_changes(core: MemoryCore) -> None:
    add(core, ALICE, "Likes green tea", kind="preference")
    calls: list[int] = []
    embed = core.embedder.embed  # type: ignore[union-attr]

    def counting(texts: object) -> object:
        calls.append(1)
        return embed(texts)  # type: ignore[arg-type]

    core.embedder.embed = counting  # type: ignore[union-attr, method-assign]
    first = ids(core, "what does she drink")
    assert ids(core, "what does she drink") == first and len(calls) == 1
    core.save_dictionary(T, [["drink", "beverage"]])
    ids(core, "what does she drink")
    assert len(calls) >= 2 and core.queries.hits == 1


def test_a_chinese_query_skips_an_embedder_that_cannot_read_it(core: MemoryCore) -> None:
    add(core, ALICE, "客户反映快递停滞。", kind="event")
    assert not core.recall(T, [ALICE], "快递停滞", now=10_000.0).degraded
    core.embedder.reads_cjk = False  # type: ignore[union-attr]
    got = core.recall(T, [ALICE], "快递停滞", now=10_000.0)
    assert got.degraded and "does not read CJK" in got.degraded[0] and got.hits[0].vector_rank is None
    assert core.recall(T, [ALICE], "parcel stuck", now=10_000.0).hits[0].vector_rank is not None
