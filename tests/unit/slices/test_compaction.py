"""Compaction (:mod:`dormant.slices.compaction`): when it is due, where it cuts, what it asks,
what it records, and the view it leaves."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from hypothesis import event, given, settings
from hypothesis import strategies as st

from dormant.records import Input, Message, Priority, Role, SliceLoad, Summary, Thread, ToolCall, ViewLimits
from dormant.slices import compaction
from dormant.slices.compaction import INSTRUCTION, cut_index, due, pending_calls
from dormant.tokens import TokenCounter
from dormant.view.builder import message_bytes, message_tokens, summary_bytes
from tests.unit.view.test_context_properties import (
    PROPERTIES,
    World,
    check_view,
    histories,
    uncounted,
    worlds,
)

COUNTER = TokenCounter("o200k_base")


def msg(
    seq: int,
    role: Role,
    tokens: int = 10,
    *,
    calls: Sequence[str] = (),
    result_of: str | None = None,
) -> Message:
    """A message with a given stored token count (cut_index reads only the counts)."""
    return Message(
        seq=seq,
        role=role,
        content=f"{role} {seq}",
        tool_calls=tuple(ToolCall(id=c, name="f", arguments="{}") for c in calls),
        tool_call_id=result_of,
        tokens=tokens,
    )


def seqs(messages: Sequence[Message]) -> list[int]:
    return [m.seq for m in messages]


# -- due ---------------------------------------------------------------------------------


BIG = 10**9


def budget(tokens: int, messages: int = 10_000, size: int = 10**9) -> ViewLimits:
    return ViewLimits(max_tokens=tokens, max_messages=messages, max_bytes=size)


def loaded(thread: Thread, first: int | None = None, size: int = 20) -> SliceLoad:
    """``thread`` with a view of its own messages from ``first`` (default: right after
    its summary) to its last, each of ``size`` bytes by message_bytes."""
    start = thread.summary_seq + 1 if first is None else first
    view = tuple(
        Message(seq=i, role="user", content="x" * (size - 16)) for i in range(start, thread.last_seq + 1)
    )
    return SliceLoad(thread=thread, view=view, inputs=())


def test_due_when_tokens_since_the_summary_pass_the_share_of_the_budget() -> None:
    thread = Thread(id="t", agent="a", tokens=1800, summarized_tokens=1000, last_seq=20, summary_seq=10)
    assert thread.tokens_since_summary == 800
    load = loaded(thread)
    assert due(load, budget(1000), share=0.75)
    assert not due(load, budget(1000), share=0.8), "at the share exactly: not yet"
    assert not due(load, budget(2000), share=0.75)
    assert not due(loaded(Thread(id="t", agent="a")), budget(1000), share=0.75), "nothing written: never"
    assert not due(load, budget(1000), share=0.0), "share 0: compaction is off"
    settled = budget(1000, size=250)
    assert not settled.counts_tokens
    small = loaded(thread, size=16)  # 160 bytes, under 0.75 x 250
    assert not due(small, settled, share=0.75), "limits that do not count tokens: by bytes and messages"


def test_due_when_the_view_caps_would_drop_messages_before_the_budget_does() -> None:
    load = loaded(Thread(id="t", agent="a", tokens=800, last_seq=20), size=100)  # 2,000 bytes
    assert not due(load, budget(10_000), share=0.75)
    assert due(load, budget(10_000, messages=24), share=0.75), "20 messages > 0.75 x 24"
    assert due(load, budget(10_000, size=2_600), share=0.75), "2,000 bytes > 0.75 x 2,600"
    assert not due(load, budget(10_000, size=2_700), share=0.75)
    assert not due(load, budget(10_000, messages=24), share=0.0)


def test_due_when_messages_since_the_summary_already_dropped_out_of_the_view() -> None:
    thread = Thread(id="t", agent="a", last_seq=20, summary_seq=4)
    assert not due(loaded(thread), budget(10_000), share=0.75)
    assert due(loaded(thread, first=6), budget(10_000), share=0.75), "seq 5 is in no view and no summary"
    assert due(loaded(thread, first=21), budget(10_000), share=0.75), "the view holds none of them"
    inherited = Message(seq=7, role="user", content="from the parent")
    child = Thread(id="c", agent="a", last_seq=3, parent_id="p", parent_seq=7)
    load = loaded(child)
    load = msgspec.structs.replace(load, view=(inherited, *load.view), inherited=1)
    assert not due(load, budget(10_000), share=0.75), "a child's own messages start at seq 1"


# -- pending calls -----------------------------------------------------------------------


def test_pending_calls_are_the_calls_with_no_result_after_them() -> None:
    history = [
        msg(1, "assistant", calls=["a", "b"]),
        msg(2, "tool", result_of="a"),
        msg(3, "assistant", calls=["c"]),
        msg(4, "user"),
    ]
    assert pending_calls(history) == {"b", "c"}
    assert pending_calls([*history, msg(5, "tool", result_of="c"), msg(6, "tool", result_of="b")]) == set()
    assert pending_calls([]) == set()


# -- cut_index ---------------------------------------------------------------------------


def test_no_cut_under_two_messages() -> None:
    assert cut_index([], 0, BIG) is None
    assert cut_index([msg(1, "user")], 0, BIG) is None


def test_cut_keeps_the_newest_messages_that_fit_keep_tokens() -> None:
    own = [msg(i, "user" if i % 2 else "assistant") for i in range(1, 7)]
    assert cut_index(own, 35, BIG) == 2, "keeps the 3 newest (30 tokens)"
    assert cut_index(own, 30, BIG) == 2
    assert cut_index(own, 29, BIG) == 3


def test_cut_keeps_at_least_the_newest_message() -> None:
    own = [msg(1, "user"), msg(2, "assistant"), msg(3, "user", tokens=1000)]
    assert cut_index(own, 0, BIG) == 1
    assert cut_index(own, 10, BIG) == 1


def test_no_cut_when_everything_fits() -> None:
    own = [msg(1, "user"), msg(2, "assistant"), msg(3, "user")]
    assert cut_index(own, 30, BIG) is None


def test_cut_never_falls_between_a_call_and_its_results() -> None:
    own = [
        msg(1, "user"),
        msg(2, "assistant", calls=["a", "b"]),
        msg(3, "tool", result_of="a"),
        msg(4, "tool", result_of="b"),
        msg(5, "assistant"),
    ]
    # the 2 newest fit: the cut would fall after result a; it moves before the call
    assert cut_index(own, 20, BIG) == 0
    assert cut_index(own, 10, BIG) == 3, "after the last result: allowed"
    assert cut_index(own, 35, BIG) == 0


def test_cut_keeps_what_fits_keep_bytes_too() -> None:
    # uncounted messages (limits that do not count tokens) are cut by bytes alone
    own = [Message(seq=i, role="user", content="x" * 284) for i in range(1, 5)]
    assert {message_bytes(m) for m in own} == {300}
    assert cut_index(own, 0, 600) == 1, "keeps the 2 newest (600 bytes)"
    assert cut_index(own, 0, 599) == 2
    assert cut_index(own, 10**6, 900) == 0
    assert cut_index(own, 10**6, 1200) is None


def test_a_pending_call_stays_after_the_cut() -> None:
    own = [
        msg(1, "user"),
        msg(2, "assistant"),
        msg(3, "assistant", calls=["slow"]),  # async: no result yet
        msg(4, "user"),  # the user wrote meanwhile
        msg(5, "assistant"),
    ]
    assert cut_index(own, 10, BIG) == 1, "not at or after the waiting call"
    partly = [
        msg(1, "user"),
        msg(2, "assistant", calls=["a", "b"]),
        msg(3, "tool", result_of="a"),  # b still waits
        msg(4, "user"),
    ]
    assert cut_index(partly, 10, BIG) == 0
    assert cut_index([msg(1, "assistant", calls=["a"]), msg(2, "user"), msg(3, "user")], 0, BIG) is None


def test_no_cut_when_only_results_of_the_first_call_could_be_summarized() -> None:
    own = [
        msg(1, "assistant", calls=["a", "b"]),
        msg(2, "tool", result_of="a"),
        msg(3, "tool", result_of="b"),
        msg(4, "user"),
    ]
    # the natural cut (after result a) moves back before the call: nothing left to cut;
    # cutting later (after result b) would be valid too but keep less than keep_tokens allows
    assert cut_index(own, 20, BIG) is None
    assert cut_index(own, 10, BIG) == 2


def valid_starts(own: Sequence[Message]) -> list[int]:
    """Indexes where the kept part may start: no call before it has a result at or after it,
    and no call before it waits for a result."""
    pending = pending_calls(own)
    out = []
    for start in range(1, len(own)):
        before = {c.id for m in own[:start] for c in m.tool_calls}
        split = any(m.tool_call_id in before for m in own[start:] if m.role == "tool")
        waiting = bool(before & pending)
        if not split and not waiting:
            out.append(start)
    return out


@settings(PROPERTIES, max_examples=500)
@given(
    own=histories(huge=False),
    keep_tokens=st.integers(0, 3000),
    keep_bytes=st.integers(0, 30_000) | st.just(BIG),
)
def test_cut_obeys_the_pairing_rules_and_the_keep_budget(
    own: list[Message], keep_tokens: int, keep_bytes: int
) -> None:
    index = cut_index(own, keep_tokens, keep_bytes)

    def fits(kept: Sequence[Message]) -> bool:  # stored counts: 0 where none was stored
        return (
            sum(m.tokens for m in kept) <= keep_tokens and sum(message_bytes(m) for m in kept) <= keep_bytes
        )

    # the natural start: the oldest that keeps the newest messages within both budgets
    natural = len(own) - 1
    while natural > 0 and fits(own[natural - 1 :]):
        natural -= 1
    allowed = [s for s in valid_starts(own) if s <= natural]
    if len(own) < 2 or not allowed:
        assert index is None
        return
    assert index is not None
    summarized, kept = own[: index + 1], own[index + 1 :]
    assert kept, "at least the newest message is kept"
    assert kept[0].role != "tool", "never between a call and its results"
    called = {c.id for m in summarized for c in m.tool_calls}
    assert not any(m.tool_call_id in called for m in kept), "a call and its results on one side"
    assert not called & pending_calls(own), "a pending call stays after the cut"
    # the latest allowed start at or before the natural one: what fits the keep budget,
    # plus what the pairing rules add (never less: a later allowed start is not taken)
    assert index + 1 == max(allowed)
    event("cut at the natural start" if index + 1 == natural else "cut moved earlier")
    if index + 1 == natural and natural < len(own) - 1:
        assert fits(kept)


# -- request, summary, compacted ---------------------------------------------------------


def _load() -> SliceLoad:
    """A child thread's load: 2 inherited messages, then its own 5 after a previous summary."""
    inherited = (msg(1, "user", 7), msg(2, "assistant", 7))
    own = (
        msg(11, "user", 5),
        msg(12, "assistant", 6, calls=["c"]),
        msg(13, "tool", 7, result_of="c"),
        msg(14, "assistant", 8),
        msg(15, "user", 9),
    )
    thread = Thread(id="p/c", agent="a", parent_id="p", parent_seq=2, last_seq=15, tokens=1000, summary_seq=0)
    previous = Summary(
        thread_id="p", upto_seq=0, content="the parent's story", tokens=5, covered_tokens=0, made_at_seq=2
    )
    inputs = (
        Input(
            id=1,
            thread_id="p/c",
            kind="user",
            dedup_key="k",
            content="next",
            priority=Priority.P1,
            not_before=0.0,
            admitted_at=0.0,
        ),
    )
    return SliceLoad(thread=thread, view=(*inherited, *own), inputs=inputs, summary=previous, inherited=2)


def test_request_asks_to_summarize_the_covered_part() -> None:
    load = _load()
    request = compaction.request(load, 2, "Summarize in under {max_words} words.", 123)
    assert request.thread_id == "p/c"
    assert request.system == "Summarize in under 123 words."
    assert seqs(request.messages[:-1]) == [1, 2, 11, 12, 13], "what it inherited, then own up to the cut"
    closing = request.messages[-1]
    assert (closing.role, closing.content, closing.seq, closing.source) == (
        "user",
        INSTRUCTION,
        14,
        "compaction",
    )
    assert request.summary == "the parent's story", "the previous summary is passed on"
    assert (
        compaction.request(msgspec.structs.replace(load, summary=None), 2, "{max_words}", 1).summary is None
    )
    default = compaction.request(load, 2, compaction.DEFAULT_PROMPT, 500)
    assert "under 500 words" in default.system and "{" not in default.system
    custom = compaction.request(load, 2, 'Reply as {"summary": "..."} in {max_words} words.', 80)
    assert custom.system == 'Reply as {"summary": "..."} in 80 words.', "other braces are left alone"


def test_summary_records_what_it_covers() -> None:
    load = _load()
    new = compaction.summary(load, 2, "they searched", tokens=4, now=99.0)
    assert new == Summary(
        thread_id="p/c",
        upto_seq=13,
        content="they searched",
        tokens=4,
        covered_tokens=1000 - (8 + 9),  # the thread's tokens minus those after the cut
        made_at_seq=15,
        created_at=99.0,
    )
    tiny = msgspec.structs.replace(load, thread=msgspec.structs.replace(load.thread, tokens=3))
    assert compaction.summary(tiny, 2, "x", tokens=1, now=0.0).covered_tokens == 0, "never negative"


def test_compacted_view_starts_after_the_cut() -> None:
    load = _load()
    new = compaction.summary(load, 2, "they searched", tokens=4, now=0.0)
    after = compaction.compacted(load, 2, new)
    assert seqs(after.view) == [14, 15]
    assert after.inherited == 0 and after.summary == new
    assert (after.thread, after.inputs) == (load.thread, load.inputs)


@PROPERTIES
@given(
    world=worlds(),
    limits=st.builds(
        ViewLimits,
        max_tokens=st.integers(500, 5000),
        max_bytes=st.integers(4000, 60_000),
        max_messages=st.integers(4, 64),
    ),
    keep_share=st.floats(0, 1.2),
)
def test_compacting_a_view_then_rebuilding_it(world: World, limits: ViewLimits, keep_share: float) -> None:
    """Compact a random view (the runtime's steps), then build the thread's next view from
    the new summary: it obeys every view rule, and it is the compacted view when that fits."""
    view, inherited = world.build(limits)
    thread = world.thread()
    load = SliceLoad(thread=thread, view=view, inputs=(), summary=world.summary, inherited=inherited)
    own = view[inherited:]
    keep_tokens = int(keep_share * sum(m.tokens for m in own))
    index = cut_index(own, keep_tokens, int(keep_share * sum(message_bytes(m) for m in own)))
    event(f"cut: {index is not None}, inherited: {inherited > 0}")
    if index is None:
        return
    request = compaction.request(load, index, compaction.DEFAULT_PROMPT, 100)
    covered = request.messages[:-1]
    called = {c.id for m in covered for c in m.tool_calls}
    assert not any(m.tool_call_id in called for m in view[len(covered) :]), "no call split from a result"
    text = "a summary"
    new = compaction.summary(load, index, text, COUNTER.count("system", text), 0.0)
    assert new.thread_id == thread.id and new.upto_seq == view[inherited + index].seq
    after = compaction.compacted(load, index, new)
    assert after.view == view[inherited + index + 1 :] and after.view[0].role != "tool"

    # the next slice: the store loads the thread with its new summary
    world.summary = new
    rebuilt, rebuilt_inherited = world.build(limits)
    check_view(world, limits, rebuilt, rebuilt_inherited)
    assert rebuilt_inherited == 0
    # (which messages carry a count may differ: each is counted only where that decides)
    suffix = after.view[len(after.view) - len(rebuilt) :]
    assert uncounted(rebuilt) == uncounted(suffix), "a suffix of the compacted view"
    fits = (
        len(after.view) <= limits.max_messages
        and new.tokens + sum(message_tokens(m) for m in after.view) <= limits.max_tokens
        and summary_bytes(new) + sum(message_bytes(m) for m in after.view) <= limits.max_bytes
    )
    if fits:
        assert uncounted(rebuilt) == uncounted(after.view)


def test_cut_index_keeps_no_more_than_keep_messages() -> None:
    own = [Message(seq=n, role="user" if n % 2 else "assistant", content=f"m{n}") for n in range(1, 7)]
    assert cut_index(own, 10**6, 10**6) is None, "tokens and bytes alone keep everything: no cut"
    assert cut_index(own, 10**6, 10**6, keep_messages=2) == 3, "the newest two kept"
    assert cut_index(own, 10**6, 10**6, keep_messages=0) == 4, "at least the newest message kept"


def test_after_overflow_halves_every_budget() -> None:
    limits = ViewLimits(max_messages=64, max_bytes=1000, max_tokens=8000)
    smaller = compaction.after_overflow(limits)
    assert (smaller.max_messages, smaller.max_bytes, smaller.max_tokens) == (32, 500, 4000)
    assert smaller.encoding == limits.encoding
    tiny = compaction.after_overflow(ViewLimits(max_messages=1, max_bytes=1, max_tokens=1))
    assert (tiny.max_messages, tiny.max_bytes, tiny.max_tokens) == (1, 1, 1)
