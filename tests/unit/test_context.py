"""The view builder (:func:`dormant.context.build_view`) over in-memory histories."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from hypothesis import given
from hypothesis import strategies as st

from dormant.context import MESSAGE_OVERHEAD, ViewCache, build_view, drop_orphans, extend_view, message_bytes
from dormant.records import Message, Thread, ToolCall, ViewLimits


class Histories:
    """Threads' histories and parent links, served the way a store serves them."""

    def __init__(self) -> None:
        self.messages: dict[str, list[Message]] = {}
        self.parents: dict[str, tuple[str, int]] = {}
        self.fetched: list[tuple[str, int, int]] = []

    def fetch(self, thread_id: str, max_seq: int, limit: int) -> Iterable[Message]:
        self.fetched.append((thread_id, max_seq, limit))
        rows = [m for m in self.messages[thread_id] if m.seq <= max_seq]
        return list(reversed(rows))[:limit]

    def parent_of(self, thread_id: str) -> tuple[str, int] | None:
        return self.parents.get(thread_id)

    def view(self, thread: Thread, limits: ViewLimits) -> tuple[Message, ...]:
        return build_view(thread, limits, self.fetch, self.parent_of)


def numbered(contents: Sequence[str], role: str = "user") -> list[Message]:
    return [Message(seq=i + 1, role=role, content=c) for i, c in enumerate(contents)]  # type: ignore[arg-type]


def test_view_is_the_newest_messages_oldest_first_and_bounded_by_count() -> None:
    h = Histories()
    h.messages["t"] = numbered([f"m{i}" for i in range(1, 11)])
    view = h.view(Thread(id="t", agent="a", last_seq=10), ViewLimits(max_messages=4))
    assert [m.seq for m in view] == [7, 8, 9, 10]
    assert max(limit for _, _, limit in h.fetched) <= 4, "never fetches more than the bound"


def test_view_is_bounded_by_bytes() -> None:
    h = Histories()
    h.messages["t"] = numbered(["x" * 100] * 10)
    size = message_bytes(h.messages["t"][0])
    view = h.view(Thread(id="t", agent="a", last_seq=10), ViewLimits(max_bytes=size * 3 + size // 2))
    assert [m.seq for m in view] == [8, 9, 10]


def test_one_oversized_newest_message_is_still_shown() -> None:
    h = Histories()
    h.messages["t"] = numbered(["small", "y" * 5000])
    view = h.view(Thread(id="t", agent="a", last_seq=2), ViewLimits(max_bytes=100))
    assert [m.seq for m in view] == [2]


def test_view_reads_only_up_to_last_seq() -> None:
    h = Histories()
    h.messages["t"] = numbered(["a", "b", "c"])
    view = h.view(Thread(id="t", agent="a", last_seq=2), ViewLimits())
    assert [m.content for m in view] == ["a", "b"]


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


def test_drop_orphans_keeps_everything_after_the_first_non_tool_message() -> None:
    messages = [
        Message(seq=1, role="tool", content="x", tool_call_id="a"),
        Message(seq=2, role="user", content="u"),
        Message(seq=3, role="tool", content="y", tool_call_id="b"),
    ]
    assert [m.seq for m in drop_orphans(messages)] == [2, 3]
    assert drop_orphans([messages[0]]) == ()


def test_child_thread_sees_parent_history_up_to_the_spawn_point() -> None:
    h = Histories()
    h.messages["p"] = numbered(["p1", "p2", "p3", "p4 after spawn"])
    h.messages["p/c"] = numbered(["task", "child reply"])
    h.parents["p/c"] = ("p", 3)
    child = Thread(id="p/c", agent="a", parent_id="p", parent_seq=3, last_seq=2)
    view = h.view(child, ViewLimits())
    assert [m.content for m in view] == ["p1", "p2", "p3", "task", "child reply"]


def test_grandchild_sees_the_whole_chain_within_bounds() -> None:
    h = Histories()
    h.messages["g"] = numbered(["g1", "g2", "g3"])
    h.messages["g/p"] = numbered(["p1", "p2"])
    h.messages["g/p/c"] = numbered(["c1"])
    h.parents["g/p"] = ("g", 2)
    h.parents["g/p/c"] = ("g/p", 1)
    child = Thread(id="g/p/c", agent="a", parent_id="g/p", parent_seq=1, last_seq=1)
    assert [m.content for m in h.view(child, ViewLimits())] == ["g1", "g2", "p1", "c1"]
    assert [m.content for m in h.view(child, ViewLimits(max_messages=2))] == ["p1", "c1"]


def test_parent_messages_count_against_the_same_bounds() -> None:
    h = Histories()
    h.messages["p"] = numbered(["p" * 500, "q" * 500])
    h.messages["p/c"] = numbered(["task"])
    h.parents["p/c"] = ("p", 2)
    child = Thread(id="p/c", agent="a", parent_id="p", parent_seq=2, last_seq=1)
    budget = message_bytes(h.messages["p/c"][0]) + message_bytes(h.messages["p"][1]) + 10
    view = h.view(child, ViewLimits(max_bytes=budget))
    assert [m.content[:1] for m in view] == ["q", "t"]


# -- properties over random histories ----------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Well-formed histories: user text, assistant replies, tool calls and their results."""
    out: list[Message] = []
    n_turns = draw(st.integers(min_value=0, max_value=12))
    call_no = 0
    for _ in range(n_turns):
        out.append(Message(seq=len(out) + 1, role="user", content="u" * draw(st.integers(0, 300))))
        for _ in range(draw(st.integers(0, 2))):
            n_calls = draw(st.integers(0, 3))
            calls = []
            for _ in range(n_calls):
                call_no += 1
                calls.append(ToolCall(id=f"c{call_no}", name="f", arguments="{}"))
            out.append(
                Message(
                    seq=len(out) + 1,
                    role="assistant",
                    content="a" * draw(st.integers(0, 300)),
                    tool_calls=tuple(calls),
                )
            )
            for c in calls:
                out.append(
                    Message(
                        seq=len(out) + 1,
                        role="tool",
                        content="r" * draw(st.integers(0, 300)),
                        tool_call_id=c.id,
                    )
                )
    return out


def _bytes(messages: Sequence[Message]) -> int:
    return sum(message_bytes(m) for m in messages)


@given(
    history=histories(),
    max_messages=st.integers(min_value=1, max_value=20),
    max_bytes=st.integers(min_value=1, max_value=3000),
)
def test_view_respects_bounds_and_never_starts_with_a_tool_result(
    history: list[Message], max_messages: int, max_bytes: int
) -> None:
    h = Histories()
    h.messages["t"] = history
    view = h.view(
        Thread(id="t", agent="a", last_seq=len(history)),
        ViewLimits(max_messages=max_messages, max_bytes=max_bytes),
    )

    assert len(view) <= max_messages
    assert len(view) <= 1 or _bytes(view) <= max_bytes
    assert not view or view[0].role != "tool"
    # a suffix of the history: the newest messages, oldest first, nothing skipped
    assert list(view) == history[len(history) - len(view) :]
    # every tool result in the view has its call in the view
    called = {c.id for m in view for c in m.tool_calls}
    assert all(m.tool_call_id in called for m in view if m.role == "tool")
    # as many messages as fit: the view plus the tool results dropped before it was the
    # picked window, and that window stopped at a bound (or at the start of history)
    start = len(history) - len(view)
    dropped = 0
    while start - dropped - 1 >= 0 and history[start - dropped - 1].role == "tool":
        dropped += 1

    def stopped_at_bound(k: int) -> bool:
        return k == len(history) or k == max_messages or _bytes(history[len(history) - k - 1 :]) > max_bytes

    assert any(stopped_at_bound(len(view) + j) for j in range(dropped + 1))


@given(
    history=histories(),
    split=st.integers(min_value=0, max_value=200),
    max_messages=st.integers(min_value=1, max_value=20),
    max_bytes=st.integers(min_value=1, max_value=3000),
)
def test_extending_a_current_view_equals_rebuilding_it(
    history: list[Message], split: int, max_messages: int, max_bytes: int
) -> None:
    """What the view cache relies on: extend_view(view of a prefix, rest) == view of the whole."""
    split = min(split, len(history))
    limits = ViewLimits(max_messages=max_messages, max_bytes=max_bytes)
    h = Histories()
    h.messages["t"] = history
    before = h.view(Thread(id="t", agent="a", last_seq=split), limits)
    after = h.view(Thread(id="t", agent="a", last_seq=len(history)), limits)
    assert extend_view(before, history[split:], limits) == after


def _msgs(n: int, start: int = 1, size: int = 10) -> tuple[Message, ...]:
    return tuple(Message(seq=start + i, role="user", content="x" * size) for i in range(n))


def test_view_cache_serves_only_current_views() -> None:
    cache = ViewCache(max_bytes=1_000_000)
    limits = ViewLimits()
    view = _msgs(3)
    cache.put("t", 3, limits, view)
    assert cache.get("t", 3, limits) == view
    assert cache.get("t", 4, limits) is None, "a newer last_seq means the entry is stale"
    assert cache.get("t", 3, ViewLimits(max_messages=2)) is None, "other bounds, other view"
    assert cache.get("other", 3, limits) is None
    assert (cache.hits, cache.misses) == (1, 3)


def test_view_cache_advance_extends_or_drops() -> None:
    cache = ViewCache(max_bytes=1_000_000)
    limits = ViewLimits(max_messages=4)
    cache.put("t", 3, limits, _msgs(3))
    cache.advance("t", _msgs(2, start=4))
    assert [m.seq for m in cache.get("t", 5, limits) or ()] == [2, 3, 4, 5]
    cache.advance("t", _msgs(1, start=9))  # a gap: some commit was not seen
    assert cache.get("t", 9, limits) is None and len(cache) == 0
    cache.advance("unknown", _msgs(1))
    assert len(cache) == 0


def test_view_cache_is_bounded_by_bytes_and_entries() -> None:
    one = sum(message_bytes(m) + MESSAGE_OVERHEAD for m in _msgs(2))
    cache = ViewCache(max_bytes=one * 3, max_entries=100)
    limits = ViewLimits()
    for i in range(10):
        cache.put(f"t{i}", 2, limits, _msgs(2))
        assert cache.bytes <= cache.max_bytes
    assert len(cache) == 3
    assert cache.get("t9", 2, limits) is not None and cache.get("t0", 2, limits) is None, "LRU goes first"
    small = ViewCache(max_bytes=10**9, max_entries=2)
    for i in range(5):
        small.put(f"t{i}", 1, limits, _msgs(1))
    assert len(small) == 2
    cache.put("huge", 1, limits, _msgs(1, size=10 * one))
    assert cache.get("huge", 1, limits) is None, "a view larger than the budget is not kept"
    assert cache.bytes <= cache.max_bytes
    cache.clear()
    assert (len(cache), cache.bytes) == (0, 0)
    cache.discard("nothing")


def test_view_cache_recency_protects_used_entries() -> None:
    one = sum(message_bytes(m) + MESSAGE_OVERHEAD for m in _msgs(1))
    cache = ViewCache(max_bytes=one * 2)
    limits = ViewLimits()
    cache.put("a", 1, limits, _msgs(1))
    cache.put("b", 1, limits, _msgs(1))
    assert cache.get("a", 1, limits) is not None
    cache.put("c", 1, limits, _msgs(1))
    assert cache.get("a", 1, limits) is not None and cache.get("b", 1, limits) is None
