"""The page manager (:mod:`dormant.view.pages`): one policy for kept, summarized, moved out
and recalled content; density-weighted compaction cuts."""

from __future__ import annotations

import pytest

from dormant.config import Settings
from dormant.errors import UsageError
from dormant.records import Message, ViewLimits
from dormant.slices.compaction import cut_index
from dormant.view.pages import DEFAULT_DENSITIES, PagePolicy


def tool_result(seq: int, name: str, tokens: int = 100, content: str = "x") -> Message:
    return Message(seq=seq, role="tool", content=content, tool_call_id=f"c{seq}", name=name, tokens=tokens)


def call(seq: int, name: str) -> Message:
    from dormant.records import ToolCall

    return Message(
        seq=seq,
        role="assistant",
        content="",
        tool_calls=(ToolCall(id=f"c{seq + 1}", name=name, arguments="{}"),),
        tokens=10,
    )


def user(seq: int, tokens: int = 100) -> Message:
    return Message(seq=seq, role="user", content="u" * 10, tokens=tokens)


POLICY = PagePolicy(classes={"scan": "ocr", "ticket": "structured"})
LIMITS = ViewLimits(max_tokens=1000, max_bytes=10**9, max_messages=10_000)


def history(tool: str) -> list[Message]:
    """Ten call/result pairs of ``tool`` (results of 100 tokens), then a user message."""
    out: list[Message] = []
    seq = 1
    for _ in range(10):
        out += [call(seq, tool), tool_result(seq + 1, tool)]
        seq += 2
    return [*out, user(seq, tokens=10)]


def kept(policy: PagePolicy, own: list[Message]) -> int:
    keep = policy.keep_limits(LIMITS)
    index = cut_index(
        own,
        keep.tokens,
        keep.bytes,
        keep.messages,
        weight=keep.weight,
        cap_tokens=keep.cap_tokens,
        cap_bytes=keep.cap_bytes,
    )
    assert index is not None
    return sum(m.tokens for m in own[index + 1 :])


def test_defaults_follow_the_write_up() -> None:
    policy = PagePolicy()
    assert policy.compact_at == 0.85
    assert dict(DEFAULT_DENSITIES) == {"text": 1.0, "ocr": 0.3, "structured": 1.8}
    assert policy.memories_share == 0.10
    assert PagePolicy.from_settings(Settings.build(store="memory://")).compact_at == 0.85
    assert PagePolicy.from_settings(Settings.build(store="memory://", compaction_share=0.5)).compact_at == 0.5


def test_content_classes_come_from_the_tool() -> None:
    assert POLICY.kind_of(tool_result(2, "scan")) == "ocr"
    assert POLICY.density(tool_result(2, "ticket")) == 1.8
    assert POLICY.kind_of(tool_result(2, "other")) == "text"
    assert POLICY.kind_of(user(1)) == "text"


def test_dense_content_keeps_more_of_its_place_and_loose_content_less() -> None:
    plain = kept(POLICY, history("other"))
    dense = kept(POLICY, history("ticket"))
    loose = kept(POLICY, history("scan"))
    assert loose < plain < dense
    # weighted budget 0.2 x 1000: text keeps ~200 real tokens, tickets ~1.8x that, scans ~0.3x
    assert plain <= 200 and dense > 300 and loose <= 100


def test_real_tokens_kept_never_pass_half_the_threshold() -> None:
    huge = PagePolicy(densities={"text": 1.0, "dense": 50.0}, classes={"ticket": "dense"}, keep=0.3)
    assert kept(huge, history("ticket")) <= huge.compact_at / 2 * LIMITS.max_tokens


def test_sections_are_reserved_only_for_an_agent_with_a_subject() -> None:
    assert POLICY.view_limits(LIMITS, subject=False) is LIMITS
    assert POLICY.sections(LIMITS, subject=False) == (0, 0)
    memories, state = POLICY.sections(LIMITS, subject=True)
    assert (memories, state) == (100, 50)
    assert POLICY.view_limits(LIMITS, subject=True).max_tokens == 1000 - 150


def test_moved_out_are_the_summarized_results_of_move_out_classes() -> None:
    covered = [call(1, "ticket"), tool_result(2, "ticket", content="ORD-1 refund"), user(3)]
    covered += [call(4, "scan"), tool_result(5, "scan", content="blurry")]
    moved = POLICY.moved_out(covered)
    assert [(f.text, f.tags, f.kind) for f in moved] == [
        ("ORD-1 refund", {"tool": "ticket", "seq": 2}, "event")
    ]
    assert PagePolicy(move_out=frozenset()).moved_out(covered) == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keep": 1.0},
        {"compact_at": -1},
        {"memories_share": 0.3, "state_share": 0.3},
        {"densities": {"text": 1.0, "ocr": 0}},
        {"classes": {"scan": "nope"}},
    ],
)
def test_bad_policies_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        PagePolicy(**kwargs)  # type: ignore[arg-type]


def test_compaction_looks_ahead_at_the_message_cap() -> None:
    """At 0.85 of a 6-message view, "passes the share" alone fires at 6 messages since
    the summary: one turn (input + reply) later a message would have left the view
    unsummarized. It is due as soon as this slice's input and reply would not fit."""
    from dormant.records import Input, Priority, SliceLoad, Thread
    from dormant.slices.compaction import due

    def load(since: int) -> SliceLoad:
        thread = Thread(id="t", agent="a", last_seq=10 + since, summary_seq=10)
        view = tuple(user(10 + i, tokens=1) for i in range(1, since + 1))
        item = Input(
            id=1,
            thread_id="t",
            kind="user",
            dedup_key="k",
            content="hi",
            priority=Priority.P1,
            not_before=0,
            admitted_at=0,
        )
        return SliceLoad(thread=thread, view=view, inputs=(item,))

    cap = ViewLimits(max_tokens=10**6, max_bytes=10**9, max_messages=6)
    assert not due(load(4), cap, share=0.85)
    assert due(load(5), cap, share=0.85), "5 + the input + the reply pass 6"
