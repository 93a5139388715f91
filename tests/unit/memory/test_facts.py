"""Facts from the compaction call (:mod:`dormant.memory.facts`): parsed tolerantly."""

from __future__ import annotations

from dormant.memory import facts
from dormant.memory.facts import MARKER, split


def test_a_reply_without_facts_is_all_summary() -> None:
    got = split("  The user wants a refund.  ")
    assert got.summary == "The user wants a refund." and got.facts == () and got.problem is None


def test_facts_after_the_marker_are_read() -> None:
    text = (
        "Summary here.\n"
        f"{MARKER}\n"
        '[{"text": "Ships to 1 Main St", "tags": {"type": "address"}, "key": "shipping_address",'
        ' "kind": "profile", "importance": 0.9},'
        ' {"text": "Prefers email", "kind": "preference"}]'
    )
    got = split(text)
    assert got.summary == "Summary here."
    assert [f.text for f in got.facts] == ["Ships to 1 Main St", "Prefers email"]
    first = got.facts[0]
    assert first.key == "shipping_address" and first.kind == "profile" and first.importance == 0.9
    assert first.tags == {"type": "address"}
    assert got.facts[1].key is None and got.facts[1].importance == 0.5
    assert got.facts_text.startswith(MARKER)


def test_fenced_or_broken_facts_never_stop_the_summary() -> None:
    fenced = split(f'S.\n{MARKER}\n```json\n[{{"text": "a"}}]\n```')
    assert [f.text for f in fenced.facts] == ["a"]
    broken = split(f'S.\n{MARKER}\n[{{"text": ')
    assert broken.summary == "S." and broken.facts == () and broken.problem is not None
    nothing = split(f"S.\n{MARKER}\nnone")
    assert nothing.facts == () and nothing.problem is not None


def test_each_bad_fact_is_dropped_alone_and_fields_are_bounded() -> None:
    text = (
        f"S\n{MARKER}\n"
        '[1, {"text": ""}, {"text": "ok", "importance": 7, "kind": "knowledge",'
        ' "tags": {"key": "x", "bad name": 1, "n": 3, "l": [1], "s": "  v  "}, "key": 5},'
        ' {"text": "nan", "importance": NaN}]'
    )
    got = split(text)
    assert [f.text for f in got.facts] == ["ok", "nan"]
    ok = got.facts[0]
    assert ok.importance == 1.0 and ok.kind == "fact" and ok.key is None
    assert ok.tags == {"n": 3, "s": "v"}, "reserved, invalid and non-scalar tags dropped"
    assert got.facts[1].importance == 0.5
    many = split(f"S\n{MARKER}\n[" + ",".join('{"text": "f"}' for _ in range(50)) + "]")
    assert len(many.facts) == facts.MAX_FACTS


def test_the_extra_tokens_are_the_instruction_and_the_facts_part() -> None:
    plain = split("S")
    base = facts.extra_tokens(plain)
    assert 100 < base < 400, "the instruction alone"
    with_facts = split(f"S\n{MARKER}\n" + '[{"text": "Prefers email"}]')
    assert facts.extra_tokens(with_facts) > base
