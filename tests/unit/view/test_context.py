"""The view builder (:func:`dormant.view.builder.build_view`) and the view cache, by example.

The properties over random histories are in ``test_context_properties.py``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from dormant.records import Message, Role, Summary, Thread, ToolCall, ViewLimits
from dormant.tokens import TokenCounter
from dormant.view.builder import (
    MAX_CHUNK,
    MESSAGE_OVERHEAD,
    MIN_CHUNK,
    MIN_CLIP_BYTES,
    MIN_CLIP_TOKENS,
    build_view,
    clip,
    drop_orphans,
    extend_view,
    message_bytes,
    message_tokens,
    summary_bytes,
)
from dormant.view.cache import GHOST_SHARE, ViewCache

COUNTER = TokenCounter("o200k_base")
NOTE = " characters cut from the middle of this message ...]\n"


class Histories:
    """Threads' histories and parent links, served the way a store serves them."""

    def __init__(self) -> None:
        self.messages: dict[str, list[Message]] = {}
        self.parents: dict[str, tuple[str, int]] = {}
        self.fetched: list[tuple[str, int, int, int]] = []
        self.read: list[Message] = []
        self.asked_parent: list[str] = []

    def fetch(self, thread_id: str, max_seq: int, min_seq: int, limit: int) -> Iterable[Message]:
        self.fetched.append((thread_id, max_seq, min_seq, limit))
        rows = [m for m in self.messages[thread_id] if min_seq < m.seq <= max_seq]
        got = list(reversed(rows))[:limit]
        self.read.extend(got)
        return got

    def parent_of(self, thread_id: str) -> tuple[str, int] | None:
        self.asked_parent.append(thread_id)
        return self.parents.get(thread_id)

    def build(
        self, thread: Thread, limits: ViewLimits, summary: Summary | None = None
    ) -> tuple[tuple[Message, ...], int]:
        self.fetched.clear()
        self.read.clear()
        return build_view(thread, limits, self.fetch, self.parent_of, summary)

    def view(self, thread: Thread, limits: ViewLimits, summary: Summary | None = None) -> tuple[Message, ...]:
        return self.build(thread, limits, summary)[0]


def numbered(contents: Sequence[str], role: Role = "user") -> list[Message]:
    return [Message(seq=i + 1, role=role, content=c) for i, c in enumerate(contents)]


def counted(message: Message) -> Message:
    """``message`` with its real token count, as the runtime stores it."""
    return msgspec.structs.replace(message, tokens=COUNTER.message(message))


def text(n: int, word: str = "alpha") -> str:
    """``n`` words of one token each (``alpha beta`` ... are single o200k tokens)."""
    return " ".join([word] * n)


def summary_of(thread_id: str, upto_seq: int, content: str = "what happened before") -> Summary:
    return Summary(
        thread_id=thread_id,
        upto_seq=upto_seq,
        content=content,
        tokens=COUNTER.count("system", content),
        covered_tokens=0,
        made_at_seq=upto_seq,
    )


def _bytes(messages: Sequence[Message]) -> int:
    return sum(message_bytes(m) for m in messages)


def _tokens(messages: Sequence[Message]) -> int:
    return sum(message_tokens(m) for m in messages)


# -- bounds ------------------------------------------------------------------------------


def test_view_is_the_newest_messages_oldest_first_and_bounded_by_count() -> None:
    h = Histories()
    h.messages["t"] = numbered([f"m{i}" for i in range(1, 11)])
    view, inherited = h.build(Thread(id="t", agent="a", last_seq=10), ViewLimits(max_messages=4))
    assert [m.seq for m in view] == [7, 8, 9, 10]
    assert inherited == 0
    assert max(limit for *_, limit in h.fetched) <= 4, "never asks for more than the bound"
    assert len(h.read) <= 4 + 1, "reads at most one message past the bound"


def test_a_view_full_by_its_message_count_reads_nothing_past_it() -> None:
    """A cache miss of a full view is one range read: the count bound needs no look at
    the message before the view (a second statement, and a second pass of the builder
    over everything read, under the store's driver)."""
    h = Histories()
    h.messages["t"] = numbered([f"m{i}" for i in range(1, 101)])
    view, _ = h.build(Thread(id="t", agent="a", last_seq=100), ViewLimits(max_messages=64))
    assert [m.seq for m in view] == list(range(37, 101))
    assert len(h.fetched) == 1, "one statement"
    assert len(h.read) == 64, "nothing past the count bound"


def test_view_is_bounded_by_bytes() -> None:
    h = Histories()
    h.messages["t"] = numbered(["x" * 100] * 10)
    size = message_bytes(h.messages["t"][0])
    view = h.view(Thread(id="t", agent="a", last_seq=10), ViewLimits(max_bytes=size * 3 + size // 2))
    assert [m.seq for m in view] == [8, 9, 10]


def test_view_is_bounded_by_tokens_with_the_stored_counts() -> None:
    h = Histories()
    h.messages["t"] = [counted(m) for m in numbered([text(20)] * 10)]
    one = h.messages["t"][0].tokens
    assert one == COUNTER.message(h.messages["t"][0]) > 20
    view = h.view(Thread(id="t", agent="a", last_seq=10, tokens=10 * one), ViewLimits(max_tokens=3 * one + 5))
    assert [m.seq for m in view] == [8, 9, 10]
    assert _tokens(view) <= 3 * one + 5


def test_a_message_with_no_stored_count_is_counted_when_a_view_needs_it() -> None:
    legacy = Message(seq=1, role="user", content=text(300))
    assert legacy.tokens == 0
    assert message_tokens(legacy) == COUNTER.message(legacy)
    h = Histories()
    h.messages["t"] = [legacy]
    thread = Thread(id="t", agent="a", last_seq=1)
    counting = ViewLimits(max_tokens=2000, max_bytes=64 * 1024)
    assert counting.counts_tokens
    assert [m.tokens for m in h.view(thread, counting)] == [COUNTER.message(legacy)]
    (shown,) = h.view(thread, ViewLimits(max_tokens=300, max_bytes=64 * 1024))
    assert shown.tokens <= MIN_CLIP_TOKENS < COUNTER.message(legacy), "clipped by its count"


def test_limits_whose_byte_cap_bounds_the_tokens_count_nothing() -> None:
    settled = ViewLimits(max_tokens=4 * 4096, max_bytes=4096)
    assert not settled.counts_tokens
    assert ViewLimits(max_tokens=4 * 4096 - 1, max_bytes=4096).counts_tokens
    h = Histories()
    h.messages["t"] = numbered([text(100)] * 50)
    view = h.view(Thread(id="t", agent="a", last_seq=50), settled)
    assert view and all(m.tokens == 0 for m in view), "nothing counted"
    assert _bytes(view) <= 4096 < _bytes(view) + message_bytes(h.messages["t"][0])
    # the bound that makes counting unnecessary: at most 4 tokens per byte of message_bytes
    worst = [
        Message(seq=1, role="assistant", content="\U0001f600" * 50, name="n" * 9),
        Message(seq=2, role="tool", content="", name="x"),
        Message(seq=3, role="assistant", content="", tool_calls=(ToolCall(id="", name="", arguments=""),)),
        Message(seq=4, role="user", content="\u4e00\u9fff" * 40),
    ]
    for m in worst:
        assert COUNTER.message(m) <= 4 * message_bytes(m), m


def test_the_summary_counts_against_the_token_and_byte_budgets() -> None:
    h = Histories()
    h.messages["t"] = [counted(m) for m in numbered([text(20)] * 10)]
    one, size = h.messages["t"][0].tokens, message_bytes(h.messages["t"][0])
    thread = Thread(id="t", agent="a", last_seq=10, summary_seq=2)
    summary = summary_of("t", 2, text(2 * one))
    assert summary.tokens > one
    view = h.view(thread, ViewLimits(max_tokens=summary.tokens + 3 * one), summary)
    assert [m.seq for m in view] == [8, 9, 10]
    view = h.view(thread, ViewLimits(max_bytes=summary_bytes(summary) + 2 * size), summary)
    assert [m.seq for m in view] == [9, 10]
    assert h.view(thread, ViewLimits(max_tokens=summary.tokens - 1), summary) == (), "nothing else fits"


def test_view_reads_only_up_to_last_seq() -> None:
    h = Histories()
    h.messages["t"] = numbered(["a", "b", "c"])
    view = h.view(Thread(id="t", agent="a", last_seq=2), ViewLimits())
    assert [m.content for m in view] == ["a", "b"]


def test_reads_stay_within_one_chunk_of_the_view() -> None:
    h = Histories()
    h.messages["t"] = [counted(m) for m in numbered([text(10)] * 1000)]
    one = h.messages["t"][0].tokens
    thread = Thread(id="t", agent="a", last_seq=1000, tokens=1000 * one)
    view = h.view(thread, ViewLimits(max_tokens=100 * one, max_messages=1000, max_bytes=10**9))
    assert len(view) == 100
    assert len(h.read) - len(view) <= 2, "chunks sized from the average message: 2 over at most"
    assert all(limit <= MAX_CHUNK for *_, limit in h.fetched)


def test_reads_are_bounded_by_a_small_byte_budget_too() -> None:
    # a small byte budget binds long before a large token budget: the chunk is sized
    # from it, not a whole MAX_CHUNK for a view of a few messages
    h = Histories()
    h.messages["t"] = [counted(m) for m in numbered([text(200)] * 300)]
    one = h.messages["t"][0].tokens
    thread = Thread(id="t", agent="a", last_seq=300, tokens=300 * one)
    limits = ViewLimits(max_tokens=100_000, max_bytes=5000, max_messages=300)
    view = h.view(thread, limits)
    # 5,000 bytes / (204 tokens x 4 bytes per token, the guess) + 2 = 8 messages read
    assert len(view) == 4 and len(h.read) <= MIN_CHUNK + 2
    assert _bytes(h.read) <= 2 * limits.max_bytes + message_bytes(h.messages["t"][0])


# -- clipping ----------------------------------------------------------------------------


def test_an_oversized_message_is_shown_clipped_and_stored_unchanged() -> None:
    h = Histories()
    big = "HEAD " + text(4000, "beta") + " TAIL"
    h.messages["t"] = [counted(m) for m in numbered(["small", big])]
    stored = h.messages["t"][1]
    limits = ViewLimits(max_tokens=2000, max_bytes=8000)
    view = h.view(Thread(id="t", agent="a", last_seq=2), limits)

    assert [m.seq for m in view] == [1, 2]
    shown = view[1]
    assert shown.content.startswith("HEAD beta") and shown.content.endswith("beta TAIL")
    head, _, rest = shown.content.partition("\n[... ")
    cut, _, tail = rest.partition(NOTE)
    assert cut == f"{len(big) - len(head) - len(tail)} of {len(big)}"
    assert big.startswith(head) and big.endswith(tail) and len(head) >= len(tail) > 0
    # it fits a quarter of the budgets, and is counted as shown
    assert message_tokens(shown) <= 2000 // 4 and message_bytes(shown) <= max(8000 // 4, MIN_CLIP_BYTES)
    assert shown.tokens == COUNTER.message(shown)
    assert (shown.seq, shown.role, shown.tool_calls) == (stored.seq, stored.role, stored.tool_calls)
    # the stored message is unchanged
    assert h.messages["t"][1] is stored and stored.content == big and stored.tokens == COUNTER.message(stored)


def test_a_message_under_the_clip_bounds_is_shown_whole() -> None:
    limits = ViewLimits(max_tokens=400, max_bytes=1000)  # bounds: 256 tokens (floor), 1 KiB (floor)
    m = counted(Message(seq=1, role="user", content=text(150)))
    assert message_tokens(m) <= MIN_CLIP_TOKENS and message_bytes(m) <= MIN_CLIP_BYTES
    assert clip(m, limits) is m
    over = counted(Message(seq=1, role="user", content=text(300)))
    assert message_bytes(over) > MIN_CLIP_BYTES
    assert clip(over, limits) != over
    assert message_tokens(clip(over, limits)) <= MIN_CLIP_TOKENS


def test_a_clipped_message_keeps_its_tool_calls_and_result_id() -> None:
    calls = (ToolCall(id="c1", name="search", arguments='{"q": "x"}'),)
    call = counted(Message(seq=1, role="assistant", content=text(5000), tool_calls=calls))
    result = counted(Message(seq=2, role="tool", content=text(5000), tool_call_id="c1"))
    limits = ViewLimits(max_tokens=4000)
    for m in (call, result):
        shown = clip(m, limits)
        assert NOTE in shown.content
        assert (shown.tool_calls, shown.tool_call_id) == (m.tool_calls, m.tool_call_id)
        assert message_tokens(shown) == COUNTER.message(shown) <= 1000


def test_a_clipped_message_with_no_stored_count_is_not_undercounted() -> None:
    # a legacy message (tokens=0) with tool calls: clipping keeps the calls whole, so their
    # tokens stay in its count (they were once counted as a flat 8 tokens)
    arguments = '{"path": "/tmp/x", "content": "' + text(2000, "word") + '"}'
    calls = (ToolCall(id="c1", name="write_file", arguments=arguments),)
    legacy = Message(seq=1, role="assistant", content=text(4000), tool_calls=calls)
    shown = clip(legacy, ViewLimits(max_tokens=500, max_bytes=64_000))
    assert NOTE in shown.content
    assert message_tokens(shown) >= COUNTER.message(shown) > 2000


def test_tool_call_arguments_are_never_clipped_so_the_budget_keeps_them_out() -> None:
    # only the text is clipped: a call whose arguments alone are over the budget is not shown
    # (nor, then, its results), whatever comes before it
    huge = ToolCall(id="c1", name="write_file", arguments='{"content": "' + "x" * 20_000 + '"}')
    h = Histories()
    h.messages["t"] = [
        counted(Message(seq=1, role="user", content="write it")),
        counted(Message(seq=2, role="assistant", content="", tool_calls=(huge,))),
        counted(Message(seq=3, role="tool", content="ok", tool_call_id="c1")),
    ]
    limits = ViewLimits(max_bytes=16_000)
    assert message_bytes(clip(h.messages["t"][1], limits)) > limits.max_bytes
    assert h.view(Thread(id="t", agent="a", last_seq=3), limits) == ()


def test_a_newest_message_over_the_whole_budget_even_clipped_is_not_shown() -> None:
    # clipping never goes under 1 KiB / 256 tokens: under a smaller budget the message does
    # not fit, and the view (a suffix of the history) ends up empty
    h = Histories()
    h.messages["t"] = numbered(["small", "y" * 5000])
    view = h.view(Thread(id="t", agent="a", last_seq=2), ViewLimits(max_bytes=100))
    assert view == ()
    view = h.view(Thread(id="t", agent="a", last_seq=2), ViewLimits(max_bytes=4 * MIN_CLIP_BYTES))
    assert [m.seq for m in view] == [1, 2] and NOTE in view[1].content


# -- pairing -----------------------------------------------------------------------------


def test_tool_results_cut_from_their_call_are_dropped() -> None:
    calls = (ToolCall(id="c1", name="f", arguments="{}"), ToolCall(id="c2", name="f", arguments="{}"))
    h = Histories()
    h.messages["t"] = [
        Message(seq=1, role="user", content="go"),
        Message(seq=2, role="assistant", content="", tool_calls=calls),
        Message(seq=3, role="tool", content="r1", tool_call_id="c1"),
        Message(seq=4, role="tool", content="r2", tool_call_id="c2"),
        Message(seq=5, role="assistant", content="done"),
    ]
    thread = Thread(id="t", agent="a", last_seq=5)
    assert [m.seq for m in h.view(thread, ViewLimits(max_messages=3))] == [5]
    assert [m.seq for m in h.view(thread, ViewLimits(max_messages=2))] == [5]
    assert [m.seq for m in h.view(thread, ViewLimits(max_messages=4))] == [2, 3, 4, 5]
    budget = _bytes(h.messages["t"][2:])
    assert [m.seq for m in h.view(thread, ViewLimits(max_bytes=budget))] == [5]


def test_drop_orphans_keeps_everything_after_the_first_non_tool_message() -> None:
    messages = [
        Message(seq=1, role="tool", content="x", tool_call_id="a"),
        Message(seq=2, role="user", content="u"),
        Message(seq=3, role="tool", content="y", tool_call_id="b"),
    ]
    assert [m.seq for m in drop_orphans(messages)] == [2, 3]
    assert drop_orphans([messages[0]]) == ()


# -- summaries ---------------------------------------------------------------------------


def test_a_summary_is_a_floor_the_view_never_reads_below() -> None:
    h = Histories()
    h.messages["t"] = numbered([f"m{i}" for i in range(1, 11)])
    h.messages["p"] = numbered(["parent"])
    h.parents["t"] = ("p", 1)
    thread = Thread(id="t", agent="a", parent_id="p", parent_seq=1, last_seq=10, summary_seq=6)
    view, inherited = h.build(thread, ViewLimits(), summary_of("t", 6))
    assert [m.seq for m in view] == [7, 8, 9, 10]
    assert inherited == 0
    assert all(min_seq == 6 for _, _, min_seq, _ in h.fetched)
    assert {m.seq for m in h.read} == {7, 8, 9, 10}, "covered messages are never read"
    assert all(thread_id == "t" for thread_id, *_ in h.fetched), "nor the ancestors'"


def test_an_inherited_summary_floors_the_ancestor_it_belongs_to() -> None:
    h = Histories()
    h.messages["g"] = numbered(["g1", "g2", "g3", "g4"])
    h.messages["g/p"] = numbered(["p1", "p2", "p3", "p4", "p5"])
    h.messages["g/p/c"] = numbered(["c1", "c2"])
    h.parents["g/p"] = ("g", 4)
    h.parents["g/p/c"] = ("g/p", 4)
    child = Thread(id="g/p/c", agent="a", parent_id="g/p", parent_seq=4, last_seq=2)
    view, inherited = h.build(child, ViewLimits(), summary_of("g/p", 2))
    assert [m.content for m in view] == ["p3", "p4", "c1", "c2"]
    assert inherited == 2
    assert "g" not in {thread_id for thread_id, *_ in h.fetched}, "nothing above the summary is read"


# -- lineage -----------------------------------------------------------------------------


def test_child_thread_sees_parent_history_up_to_the_spawn_point() -> None:
    h = Histories()
    h.messages["p"] = numbered(["p1", "p2", "p3", "p4 after spawn"])
    h.messages["p/c"] = numbered(["task", "child reply"])
    h.parents["p/c"] = ("p", 3)
    child = Thread(id="p/c", agent="a", parent_id="p", parent_seq=3, last_seq=2)
    view, inherited = h.build(child, ViewLimits())
    assert [m.content for m in view] == ["p1", "p2", "p3", "task", "child reply"]
    assert inherited == 3


def test_grandchild_sees_the_whole_chain_within_bounds() -> None:
    h = Histories()
    h.messages["g"] = numbered(["g1", "g2", "g3"])
    h.messages["g/p"] = numbered(["p1", "p2"])
    h.messages["g/p/c"] = numbered(["c1"])
    h.parents["g/p"] = ("g", 2)
    h.parents["g/p/c"] = ("g/p", 1)
    child = Thread(id="g/p/c", agent="a", parent_id="g/p", parent_seq=1, last_seq=1)
    view, inherited = h.build(child, ViewLimits())
    assert ([m.content for m in view], inherited) == (["g1", "g2", "p1", "c1"], 3)
    view, inherited = h.build(child, ViewLimits(max_messages=2))
    assert ([m.content for m in view], inherited) == (["p1", "c1"], 1)
    view, inherited = h.build(child, ViewLimits(max_messages=1))
    assert ([m.content for m in view], inherited) == (["c1"], 0)


def test_parent_messages_count_against_the_same_bounds() -> None:
    h = Histories()
    h.messages["p"] = numbered(["p" * 500, "q" * 500])
    h.messages["p/c"] = numbered(["task"])
    h.parents["p/c"] = ("p", 2)
    child = Thread(id="p/c", agent="a", parent_id="p", parent_seq=2, last_seq=1)
    budget = message_bytes(h.messages["p/c"][0]) + message_bytes(h.messages["p"][1]) + 10
    view, inherited = h.build(child, ViewLimits(max_bytes=budget))
    assert [m.content[:1] for m in view] == ["q", "t"]
    assert inherited == 1


def test_a_child_spawned_after_a_call_sees_the_call_without_its_results() -> None:
    call = ToolCall(id="c1", name="spawn", arguments="{}")
    h = Histories()
    h.messages["p"] = [
        Message(seq=1, role="user", content="delegate"),
        Message(seq=2, role="assistant", content="", tool_calls=(call,)),
        Message(seq=3, role="tool", content="child done", tool_call_id="c1"),
    ]
    h.messages["p/c"] = numbered(["task"])
    h.parents["p/c"] = ("p", 2)
    view, inherited = h.build(
        Thread(id="p/c", agent="a", parent_id="p", parent_seq=2, last_seq=1), ViewLimits()
    )
    assert ([m.seq for m in view], inherited) == ([1, 2, 1], 2)


# -- extending a view --------------------------------------------------------------------


def test_extending_a_view_equals_rebuilding_it() -> None:
    calls = (ToolCall(id="c1", name="f", arguments="{}"),)
    h = Histories()
    h.messages["t"] = [
        counted(m)
        for m in [
            Message(seq=1, role="user", content="old"),
            Message(seq=2, role="user", content=text(10)),
            Message(seq=3, role="assistant", content=text(3000), tool_calls=calls),
            Message(seq=4, role="tool", content=text(3000), tool_call_id="c1"),
            Message(seq=5, role="assistant", content=text(10)),
        ]
    ]
    summary = summary_of("t", 1)
    limits = ViewLimits(max_tokens=1200)
    for split in range(1, 6):
        before = h.view(Thread(id="t", agent="a", last_seq=split, summary_seq=1), limits, summary)
        after = h.view(Thread(id="t", agent="a", last_seq=5, summary_seq=1), limits, summary)
        assert extend_view(before, h.messages["t"][split:], limits, summary) == after
    assert [m.seq for m in after] == [2, 3, 4, 5] and all(NOTE in m.content for m in after[1:3])


# -- the view cache ----------------------------------------------------------------------


def _msgs(n: int, start: int = 1, size: int = 10) -> tuple[Message, ...]:
    return tuple(Message(seq=start + i, role="user", content="x" * size) for i in range(n))


def _row(thread_id: str, last_seq: int, summary_seq: int = 0) -> Thread:
    return Thread(id=thread_id, agent="a", last_seq=last_seq, summary_seq=summary_seq)


def _cost(view: Sequence[Message], summary: Summary | None = None) -> int:
    return _bytes(view) + summary_bytes(summary) + MESSAGE_OVERHEAD * (len(view) + 1)


def test_view_cache_serves_only_current_views() -> None:
    cache = ViewCache(max_bytes=1_000_000)
    limits = ViewLimits()
    view = _msgs(3)
    cache.put(_row("t", 3), limits, view)
    assert cache.get(_row("t", 3), limits) == (view, None, 0)
    assert cache.get(_row("t", 4), limits) is None, "a newer last_seq means the entry is stale"
    assert cache.get(_row("t", 3), ViewLimits(max_messages=2)) is None, "other bounds, other view"
    assert cache.get(_row("other", 3), limits) is None
    assert (cache.hits, cache.misses) == (1, 3)


def test_view_cache_is_keyed_by_the_summary_too() -> None:
    cache = ViewCache(max_bytes=1_000_000)
    limits = ViewLimits()
    summary = summary_of("t", 2)
    cache.put(_row("t", 5, summary_seq=2), limits, _msgs(3, start=3), summary, 0)
    assert cache.get(_row("t", 5, summary_seq=2), limits) == (_msgs(3, start=3), summary, 0)
    assert cache.get(_row("t", 5, summary_seq=4), limits) is None, "a newer summary: stale"
    assert cache.get(_row("t", 5), limits) is None
    assert cache.bytes == _cost(_msgs(3, start=3), summary), "the summary is charged"


def test_view_cache_advance_extends_or_drops() -> None:
    cache = ViewCache(max_bytes=1_000_000)
    limits = ViewLimits(max_messages=4)
    cache.put(_row("t", 3), limits, _msgs(3), None, 2)
    cache.advance("t", _msgs(2, start=4))
    got = cache.get(_row("t", 5), limits)
    assert got is not None
    assert ([m.seq for m in got[0]], got[2]) == ([2, 3, 4, 5], 1), "one inherited message fell out"
    assert cache.bytes == _cost(got[0])
    cache.advance("t", ())
    assert cache.get(_row("t", 5), limits) is not None, "nothing committed: still current"
    cache.advance("t", _msgs(1, start=9))  # a gap: some commit was not seen
    assert cache.get(_row("t", 9), limits) is None and len(cache) == 0
    cache.advance("unknown", _msgs(1))
    assert len(cache) == 0
    cache.put(_row("t", 3), limits, _msgs(3))
    cache.advance("t", _msgs(1, start=4), summarized=True)
    assert len(cache) == 0 and cache.bytes == 0, "a summary moves the view's start: dropped"


def test_view_cache_advance_clips_and_drops_orphans_like_a_rebuild() -> None:
    calls = (ToolCall(id="c1", name="f", arguments="{}"),)
    history = [
        counted(Message(seq=1, role="user", content="go")),
        counted(Message(seq=2, role="assistant", content="", tool_calls=calls)),
        counted(Message(seq=3, role="tool", content=text(3000), tool_call_id="c1")),
        counted(Message(seq=4, role="assistant", content=text(100))),
    ]
    h = Histories()
    h.messages["t"] = history
    for max_messages, seqs in ((2, [4]), (3, [2, 3, 4])):
        limits = ViewLimits(max_tokens=1000, max_messages=max_messages)
        cache = ViewCache(max_bytes=1_000_000)
        before, inherited = h.build(_row("t", 2), limits)
        cache.put(_row("t", 2), limits, before, None, inherited)
        cache.advance("t", history[2:])
        view, inherited = h.build(_row("t", 4), limits)
        assert cache.get(_row("t", 4), limits) == (view, None, inherited)
        assert [m.seq for m in view] == seqs, "a result without its call is dropped"
    assert NOTE in view[1].content


def test_view_cache_is_bounded_by_bytes_and_entries() -> None:
    one = _cost(_msgs(2))
    cache = ViewCache(max_bytes=one * 3, max_entries=100)
    limits = ViewLimits()
    for i in range(10):
        cache.put(_row(f"t{i}", 2), limits, _msgs(2))
        assert cache.bytes <= cache.max_bytes
    assert len(cache) == 3
    assert cache.get(_row("t9", 2), limits) is not None, "newest stays"
    assert cache.get(_row("t0", 2), limits) is None, "LRU goes first"
    small = ViewCache(max_bytes=10**9, max_entries=2)
    for i in range(5):
        small.put(_row(f"t{i}", 1), limits, _msgs(1))
    assert len(small) == 2
    cache.put(_row("huge", 1), limits, _msgs(1, size=10 * one))
    assert cache.get(_row("huge", 1), limits) is None, "a view larger than the budget is not kept"
    assert cache.bytes <= cache.max_bytes
    grown = ViewCache(max_bytes=one)
    grown.put(_row("t", 2), limits, _msgs(2))
    grown.advance("t", _msgs(1, start=3))
    assert len(grown) == 0 and grown.bytes == 0, "a view that grew past the budget is dropped"
    cache.clear()
    assert (len(cache), cache.bytes) == (0, 0)
    cache.discard("nothing")


def test_view_cache_recency_protects_used_entries() -> None:
    one = _cost(_msgs(1))
    cache = ViewCache(max_bytes=one * 2)
    limits = ViewLimits()
    cache.put(_row("a", 1), limits, _msgs(1))
    cache.put(_row("b", 1), limits, _msgs(1))
    assert cache.get(_row("a", 1), limits) is not None
    cache.put(_row("c", 1), limits, _msgs(1))
    assert cache.get(_row("a", 1), limits) is not None and cache.get(_row("b", 1), limits) is None


def test_view_cache_keeps_hitting_when_more_threads_cycle_than_fit() -> None:
    """Slices visit a wave's threads in turn; with plain LRU, a cache that holds half
    of them would evict each view just before its next use and never hit."""
    one = _cost(_msgs(1, size=2000))  # views of a few KB, as real ones are
    cache = ViewCache(max_bytes=one * 50)
    limits = ViewLimits(max_messages=1)  # every view costs the same
    threads = [f"t{i}" for i in range(100)]
    for turn in range(1, 21):
        for thread_id in threads:
            row = _row(thread_id, turn)
            if cache.get(row, limits) is None:
                cache.put(row, limits, _msgs(1, start=turn, size=2000))
            cache.advance(thread_id, _msgs(1, start=turn + 1, size=2000))  # the slice commits
            assert cache.bytes <= cache.max_bytes
    assert cache.hits > 0.4 * 100 * 19, "about half the threads keep their view"
    assert cache.refused > 0 and len(cache) == 50
    fresh = _row("new", 1)
    cache.put(fresh, limits, _msgs(1, size=2000))
    assert cache.get(fresh, limits) is not None, "a thread not seen before is always let in"
    # what it remembers of evictions is bounded by entries and by bytes
    for i in range(2000):
        cache.put(_row(f"{'x' * 200}-{i}", 1), limits, _msgs(1, size=2000))
        assert cache.ghost_bytes <= cache.max_bytes // GHOST_SHARE
    assert cache.ghost_bytes > 0 and len(cache) == 50
    cache.clear()
    assert (len(cache), cache.bytes) == (0, 0)


def test_view_cache_reports_and_shrinks_on_demand() -> None:
    one = _cost(_msgs(3))
    cache = ViewCache(max_bytes=one * 10)
    limits = ViewLimits()
    for n in range(6):
        cache.put(_row(f"t{n}", 3), limits, _msgs(3))
    stats = cache.stats()
    assert (stats.entries, stats.bytes, stats.max_bytes) == (6, one * 6, one * 10)
    assert cache.shrink(one * 2) == one * 4
    assert cache.stats().entries == 2 and cache.bytes == one * 2
    # the most recently used ones stay
    assert cache.get(_row("t5", 3), limits) is not None
    assert cache.get(_row("t0", 3), limits) is None
    cache.resize(one)
    assert cache.max_bytes == one and cache.bytes <= one and len(cache) == 1
    cache.put(_row("t9", 3), limits, _msgs(3))
    assert cache.bytes <= one
