"""Properties of the view builder (:mod:`dormant.view.builder`) over random histories.

Histories are well formed, as the runtime writes them: user messages, assistant
messages with no tool call or with 1-3 calls followed right away by their results
(the newest call may still wait for some of them), now and then a large or a huge
message (tens of KB, some of them carrying tool calls), most with their real token
count and some with none (written before counts were stored). On top: an optional
lineage (the thread is a child or grandchild spawned at some point of its parent's
history) and an optional compaction summary (the thread's own or an ancestor's) at a
valid cut. Every view built over them, with random limits, must respect the budget
and the pairing rules, and extending a view must give what a rebuild gives.
"""

from __future__ import annotations

import functools
import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dormant.records import Message, Role, Summary, Thread, ToolCall, ViewLimits
from dormant.tokens import TokenCounter
from dormant.view.builder import (
    CLIP_SHARE,
    MAX_CHUNK,
    MESSAGE_OVERHEAD,
    MIN_CHUNK,
    MIN_CLIP_BYTES,
    MIN_CLIP_TOKENS,
    build_view,
    clip,
    cost,
    extend_view,
    message_bytes,
    message_tokens,
    summary_bytes,
    summary_cost,
    summary_tokens,
    view_usage,
    with_count,
)
from dormant.view.cache import ViewCache

COUNTER = TokenCounter("o200k_base")
#: One token each in o200k_base, so a text of n words costs about n tokens.
_VOCABULARY = "alpha beta gamma delta river stone cloud market window silver engine garden letter orange \
planet yellow copper forest signal harbor winter summer basket candle"
WORDS = tuple(_VOCABULARY.split())
NOTE = re.compile(r"\n\[\.\.\. (\d+) of (\d+) characters cut from the middle of this message \.\.\.\]\n")

PROPERTIES = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@functools.cache
def _base() -> str:
    """A long text to cut huge messages from (generated once: cheap examples)."""
    rng = random.Random(1)
    return " ".join(rng.choice(WORDS) for _ in range(20_000))


def words(seed: int, n: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n))


def huge_text(offset: int, size: int) -> str:
    """``size`` characters of the base text from ``offset``: distinct heads and tails."""
    base = _base()
    start = offset % (len(base) - size)
    return f"<{offset}>{base[start : start + size]}</{offset}>"


# -- histories -------------------------------------------------------------------------


@st.composite
def histories(
    draw: st.DrawFn,
    *,
    min_turns: int = 0,
    max_turns: int = 8,
    huge: bool = True,
    pending: bool = True,
    tag: str = "t",
) -> list[Message]:
    """A well-formed history, seq 1..n (tool call ids are unique thanks to ``tag``)."""
    out: list[Message] = []

    def content() -> str:
        kind = draw(st.integers(0, 39))
        if huge and kind == 0:  # tens of KB
            return huge_text(draw(st.integers(0, 10**6)), draw(st.integers(12_000, 50_000)))
        if kind <= 3:  # a few hundred tokens: clipped under small budgets
            return words(draw(st.integers(0, 10**6)), draw(st.integers(100, 400)))
        return words(draw(st.integers(0, 10**6)), draw(st.integers(0, 40)))

    def add(
        role: Role, text: str, tool_calls: tuple[ToolCall, ...] = (), tool_call_id: str | None = None
    ) -> None:
        message = Message(
            seq=len(out) + 1, role=role, content=text, tool_calls=tool_calls, tool_call_id=tool_call_id
        )
        if draw(st.integers(0, 5)):  # most messages carry their real count; some none (legacy)
            message = msgspec.structs.replace(message, tokens=COUNTER.message(message))
        out.append(message)

    def call_step(answered: int | None) -> None:
        n = draw(st.integers(1, 3))
        calls = tuple(
            ToolCall(
                id=f"{tag}.{len(out) + 1}.{i}",
                name=draw(st.sampled_from(["search", "read_file", "spawn"])),
                arguments=json.dumps({"q": words(draw(st.integers(0, 10**6)), draw(st.integers(0, 12)))}),
            )
            for i in range(n)
        )
        add("assistant", content() if draw(st.booleans()) else "", calls)
        ids = [call.id for call in calls]
        order = draw(st.permutations(ids))
        for call_id in order[: n if answered is None else min(answered, n - 1)]:
            add("tool", content(), tool_call_id=call_id)

    for _ in range(draw(st.integers(min_turns, max_turns))):
        add("user", content())
        for _ in range(draw(st.integers(0, 2))):
            if draw(st.booleans()):
                call_step(None)
            else:
                add("assistant", content())
    if pending and draw(st.integers(0, 3)) == 0:  # the newest call waits for some results
        call_step(draw(st.integers(0, 2)))
    return out


def pending_ids(messages: Sequence[Message]) -> set[str]:
    """Calls without a result anywhere in ``messages``."""
    called = {call.id for m in messages for call in m.tool_calls}
    return called - {m.tool_call_id for m in messages if m.tool_call_id}


def valid_cuts(messages: Sequence[Message], upto: int) -> list[int]:
    """Seqs (1..upto) a summary may cover up to: never between a call and its results,
    never at or after a call still waiting for a result."""
    pending = pending_ids(messages)
    first_pending = next(
        (m.seq for m in messages if any(c.id in pending for c in m.tool_calls)), len(messages) + 1
    )
    return [
        k
        for k in range(1, min(upto, first_pending - 1) + 1)
        if k == len(messages) or messages[k].role != "tool"
    ]


def brief(m: Message) -> str:
    text = (
        m.content
        if len(m.content) <= 60
        else f"{m.content[:25]!r}...<{len(m.content)} chars>...{m.content[-25:]!r}"
    )
    calls = [(c.id, len(c.arguments)) for c in m.tool_calls]
    return f"{m.seq} {m.role} tokens={m.tokens} calls={calls} result_of={m.tool_call_id} {text}"


# -- a store in memory -------------------------------------------------------------------


@dataclass
class Fetch:
    thread_id: str
    max_seq: int
    min_seq: int
    limit: int
    got: list[Message]


class World:
    """A lineage of threads (root first, the thread whose view is built last) as a store
    serves them, with the summary the store would load for the last one.

    (Not a dataclass: hypothesis would print huge messages whole.)
    """

    def __init__(
        self,
        messages: dict[str, list[Message]],
        chain: list[str],
        spawn: dict[str, tuple[str, int]],  # child -> (parent, parent_seq)
        summary: Summary | None = None,
    ) -> None:
        self.messages = messages
        self.chain = chain
        self.spawn = spawn
        self.summary = summary
        self.fetches: list[Fetch] = []
        self.usage: list[int] = []  # what the last view built weighs, as build_view said

    def __repr__(self) -> str:  # huge messages: their size and ends, not their text
        lines = [f"World(chain={self.chain}, spawn={self.spawn}, summary={self.summary!r}"]
        for thread_id in self.chain:
            lines.append(f"  {thread_id}:")
            lines.extend(f"    {brief(m)}" for m in self.messages[thread_id])
        return "\n".join(lines) + ")"

    @property
    def own_id(self) -> str:
        return self.chain[-1]

    @property
    def own(self) -> list[Message]:
        return self.messages[self.own_id]

    def thread(self, last_seq: int | None = None) -> Thread:
        """The row of the last thread of the chain as it was at ``last_seq`` (default: now)."""
        last = len(self.own) if last_seq is None else last_seq
        parent = self.spawn.get(self.own_id)
        own_summary = self.summary is not None and self.summary.thread_id == self.own_id
        return Thread(
            id=self.own_id,
            agent="a",
            parent_id=parent[0] if parent else None,
            parent_seq=parent[1] if parent else 0,
            last_seq=last,
            tokens=sum(message_tokens(m) for m in self.own[:last]),
            summary_seq=self.summary.upto_seq if own_summary and self.summary is not None else 0,
        )

    def fetch(self, thread_id: str, max_seq: int, min_seq: int, limit: int) -> Iterable[Message]:
        rows = [m for m in self.messages[thread_id] if min_seq < m.seq <= max_seq]
        got = list(reversed(rows))[:limit]
        self.fetches.append(Fetch(thread_id, max_seq, min_seq, limit, got))
        return got

    def parent_of(self, thread_id: str) -> tuple[str, int] | None:
        return self.spawn.get(thread_id)

    def build(self, limits: ViewLimits, last_seq: int | None = None) -> tuple[tuple[Message, ...], int]:
        self.fetches.clear()
        self.usage = []
        return build_view(
            self.thread(last_seq), limits, self.fetch, self.parent_of, self.summary, usage=self.usage
        )

    def visible(self, last_seq: int | None = None) -> list[tuple[str, Message]]:
        """What the thread may see, oldest first: its ancestors' messages up to each spawn
        point and its own, minus what the summary covers (and all before it)."""
        out: list[tuple[str, Message]] = []
        upto = len(self.own) if last_seq is None else last_seq
        thread_id: str | None = self.own_id
        while thread_id is not None:
            floor = 0
            if self.summary is not None and self.summary.thread_id == thread_id:
                floor = self.summary.upto_seq
            out[:0] = [(thread_id, m) for m in self.messages[thread_id] if floor < m.seq <= upto]
            if floor:
                break
            link = self.spawn.get(thread_id)
            thread_id, upto = link if link else (None, 0)
        return out


@st.composite
def worlds(draw: st.DrawFn) -> World:
    """A thread with 0-2 ancestors and maybe a summary (its own or an ancestor's)."""
    depth = draw(st.integers(0, 2)) if draw(st.booleans()) else 0
    chain = ["t"] if depth == 0 else ["g", "g/p", "g/p/c"][-(depth + 1) :]
    messages: dict[str, list[Message]] = {}
    spawn: dict[str, tuple[str, int]] = {}
    for i, thread_id in enumerate(chain):
        last = i == len(chain) - 1
        turns = (8 if depth == 0 else 3) if last else 4
        messages[thread_id] = draw(
            histories(min_turns=0 if last else 1, max_turns=turns, pending=last, tag=thread_id)
        )
        if i:  # spawned at some point of its parent, maybe between a call and its results
            parent = chain[i - 1]
            spawn[thread_id] = (parent, draw(st.integers(1, len(messages[parent]))))
    world = World(messages=messages, chain=chain, spawn=spawn)
    if draw(st.booleans()):
        at = draw(st.integers(0, len(chain) - 1))
        thread_id = chain[at]
        # the summary an ancestor had when the child was spawned covers no more than that
        upto = len(messages[thread_id]) if at == len(chain) - 1 else spawn[chain[at + 1]][1]
        cuts = valid_cuts(messages[thread_id], upto)
        if cuts:
            text = words(draw(st.integers(0, 10**6)), draw(st.integers(0, 150)))
            world.summary = Summary(
                thread_id=thread_id,
                upto_seq=draw(st.sampled_from(cuts)),
                content=text,
                tokens=COUNTER.count("system", text),
                covered_tokens=0,
                made_at_seq=upto,
            )
    return world


@st.composite
def view_limits(draw: st.DrawFn) -> ViewLimits:
    return ViewLimits(
        max_tokens=draw(st.integers(50, 500) | st.integers(500, 5000)),
        max_bytes=draw(st.integers(200, 60_000)),
        max_messages=draw(st.integers(1, 64)),
    )


# -- checks ------------------------------------------------------------------------------


def clip_bounds(limits: ViewLimits) -> tuple[int, int]:
    return (
        max(limits.max_tokens // CLIP_SHARE, MIN_CLIP_TOKENS),
        max(limits.max_bytes // CLIP_SHARE, MIN_CLIP_BYTES),
    )


def check_clipped(shown: Message, original: Message, limits: ViewLimits) -> None:
    """``shown`` is ``original`` as a view shows it: itself (carrying its count if the
    limits count tokens), or its head + note + tail."""
    max_tokens, max_bytes = clip_bounds(limits)
    counting = limits.counts_tokens
    if counting:
        original = with_count(original, limits.encoding)
    small = message_bytes(original) <= max_bytes and (not counting or original.tokens <= max_tokens)
    if small:
        # as stored; counted only if its byte bound could not prove it small enough
        assert msgspec.structs.replace(shown, tokens=original.tokens) == original, "shown as stored"
        assert shown.tokens in (0, original.tokens)
        return
    # the same message, only its text (and its count) changed
    assert msgspec.structs.replace(shown, content=original.content, tokens=original.tokens) == original
    note = NOTE.search(shown.content)
    assert note is not None, shown.content[:200]
    head, tail = shown.content[: note.start()], shown.content[note.end() :]
    cut, total = int(note.group(1)), int(note.group(2))
    assert total == len(original.content)
    assert len(head) + cut + len(tail) == total, "the note says how much was cut"
    assert original.content.startswith(head) and original.content.endswith(tail)
    assert head and tail, "both ends are kept"  # generated tool calls are small: room is left
    assert message_bytes(shown) <= max_bytes, "a clipped message fits"
    # counted as it is shown, exactly, if the limits count tokens; else not at all
    if counting:
        assert shown.tokens == COUNTER.message(shown) <= max_tokens
    else:
        assert shown.tokens == 0


def check_view(
    world: World, limits: ViewLimits, view: tuple[Message, ...], inherited: int, last_seq: int | None = None
) -> None:
    summary = world.summary
    visible = world.visible(last_seq)
    assert tuple(world.usage) == view_usage(view, limits.counts_tokens), "the usage it reports is the view's"
    # the real tokens of what the view shows, whether the limits counted them or not
    tokens = sum(COUNTER.message(m) for m in view)
    if summary is not None:
        tokens += COUNTER.count("system", summary.content)
    size = summary_bytes(summary) + sum(message_bytes(m) for m in view)

    # the bounds (when the summary alone is over one, nothing fits)
    assert len(view) <= limits.max_messages
    if summary_tokens(summary, limits) > limits.max_tokens or summary_bytes(summary) > limits.max_bytes:
        assert view == ()
    assert not view or tokens <= limits.max_tokens, "within the token budget, counted or not"
    assert not view or size <= limits.max_bytes
    # the counts the budget adds up are the real ones (as shown, for a clipped message), or
    # none where the byte bounds proved the fit: what the view is taken to cost fits too
    if limits.counts_tokens:
        assert all(m.tokens in (0, COUNTER.message(m)) for m in view)
        assert (
            not view
            or summary_cost(summary, limits) + sum(cost(m) for m in view) <= limits.max_tokens
            or (summary_tokens(summary, limits) + sum(message_tokens(m) for m in view) <= limits.max_tokens)
        )

    # a contiguous suffix of what the thread may see (so nothing the summary covers, nothing
    # past a spawn point), each message as stored or clipped
    assert len(view) <= len(visible)
    tail = visible[len(visible) - len(view) :]
    for shown, (_, original) in zip(view, tail, strict=True):
        check_clipped(shown, original, limits)
    for _, message in visible[: len(visible) - len(view)]:  # and those left out, had they fitted
        check_clipped(clip(message, limits), message, limits)
    own = sum(1 for thread_id, _ in tail if thread_id == world.own_id)
    assert inherited == len(view) - own, "inherited counts the oldest messages, from ancestors"

    # pairing: never starts with a result; a call and its results are kept or dropped together
    assert not view or view[0].role != "tool"
    in_view = {(m.seq, m.tool_call_id) for m in view if m.role == "tool"}
    called = {c.id for m in view for c in m.tool_calls}
    assert all(m.tool_call_id in called for m in view if m.role == "tool")
    for position, message in enumerate(view):
        ids = {c.id for c in message.tool_calls}
        later = len(visible) - len(view) + position + 1
        results = [m for _, m in visible[later:] if m.role == "tool" and m.tool_call_id in ids]
        assert all((m.seq, m.tool_call_id) in in_view for m in results)

    # as long as fits: the picked window (the view, plus the orphan results dropped before
    # it) stopped at a bound or at the start of what is visible
    before = [m for _, m in visible[: len(visible) - len(view)]]
    orphans = 0
    while orphans < len(before) and before[-1 - orphans].role == "tool":
        orphans += 1

    def exact(m: Message) -> int:  # what the builder decides on: exact counts where they matter
        return message_tokens(m) if limits.counts_tokens else m.tokens

    def stopped(k: int) -> bool:
        window = [clip(m, limits) for _, m in visible[len(visible) - k - 1 :]]
        return (
            k == len(visible)
            or k + 1 > limits.max_messages
            or summary_tokens(summary, limits) + sum(exact(m) for m in window) > limits.max_tokens
            or summary_bytes(summary) + sum(message_bytes(m) for m in window) > limits.max_bytes
        )

    assert any(stopped(len(view) + j) for j in range(orphans + 1))

    # what was read: only what the thread may see, nothing twice, within a chunk of the view
    keys = [(f.thread_id, m.seq) for f in world.fetches for m in f.got]
    assert len(keys) == len(set(keys)), "no message is read twice"
    assert set(keys) <= {(thread_id, m.seq) for thread_id, m in visible}, "reads nothing covered or unseen"
    assert all(1 <= f.limit <= MAX_CHUNK for f in world.fetches)
    assert len(keys) <= limits.max_messages + 1
    if world.fetches:
        assert len(keys) - len(view) <= world.fetches[-1].limit + orphans


def uncounted(view: Sequence[Message]) -> tuple[Message, ...]:
    """``view`` with every count dropped (to compare what two views show)."""
    return tuple(msgspec.structs.replace(m, tokens=0) for m in view)


# -- properties --------------------------------------------------------------------------


@PROPERTIES
@given(world=worlds(), limits=view_limits())
def test_every_view_respects_the_budget_and_the_pairing_rules(world: World, limits: ViewLimits) -> None:
    view, inherited = world.build(limits)
    check_view(world, limits, view, inherited)
    # what the examples cover (pytest --hypothesis-show-statistics)
    visible = world.visible()
    event(f"lineage depth {len(world.chain) - 1}, inherited {'some' if inherited else 'none'}")
    whose = "none" if world.summary is None else world.summary.thread_id
    event(f"summary: {'own' if whose == world.own_id else 'none' if whose == 'none' else 'inherited'}")
    event(f"limits count tokens: {limits.counts_tokens}")
    event(f"view: {'all visible' if len(view) == len(visible) else 'empty' if not view else 'a suffix'}")
    event(f"clipped in view: {sum(1 for m in view if NOTE.search(m.content))}")
    event(f"pending call in view: {bool(pending_ids(view))}")
    before = visible[len(visible) - len(view) - 1 : len(visible) - len(view)]
    event(f"view starts after a tool result: {bool(before) and before[0][1].role == 'tool'}")


@PROPERTIES
@given(world=worlds(), limits=view_limits(), split=st.integers(0, 10**6))
def test_extending_a_view_equals_rebuilding_it(world: World, limits: ViewLimits, split: int) -> None:
    """What the view cache relies on: extend(view of a prefix, the rest) == view of the whole."""
    own = world.own
    floor = world.summary.upto_seq if world.summary and world.summary.thread_id == world.own_id else 0
    k = floor + split % (len(own) - floor + 1)
    before, inherited_before = world.build(limits, last_seq=k)
    check_view(world, limits, before, inherited_before, last_seq=k)
    after, inherited = world.build(limits)

    # the same messages; which of them carry a count may differ (each counted only when
    # its byte bound could not prove the fit, and exactly then)
    assert uncounted(extend_view(before, own[k:], limits, world.summary)) == uncounted(after)

    cache = ViewCache(max_bytes=10**9)
    cache.put(world.thread(k), limits, before, world.summary, inherited_before)
    cache.advance(world.own_id, own[k:])
    got = cache.get(world.thread(), limits)
    assert got is not None
    assert (uncounted(got[0]), got[1], got[2]) == (uncounted(after), world.summary, inherited)
    text = sum(message_bytes(m) for m in after) + summary_bytes(world.summary)
    assert cache.bytes == text + MESSAGE_OVERHEAD * (len(after) + 1), "charged for what it holds"


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 300),
    size=st.integers(20, 2000),
    seed=st.integers(0, 10**6),
    max_tokens=st.integers(50, 5000),
    max_bytes=st.integers(200, 60_000),
    max_messages=st.integers(1, 300),
)
def test_what_is_read_stays_near_the_token_budget(
    n: int, size: int, seed: int, max_tokens: int, max_bytes: int, max_messages: int
) -> None:
    """Messages of similar size (±25 %): chunks are sized from the token budget and the
    thread's average message, so what is read is bounded by about twice the token budget
    plus one minimal chunk; in bytes too when the token budget is the one that binds.

    Not bounded by the byte budget when that binds first: see
    ``test_context.test_reads_beyond_a_small_byte_budget_are_not_bounded_by_it``.
    """
    rng = random.Random(seed)
    history = []
    for seq in range(1, n + 1):
        text = huge_text(rng.randrange(10**6), int(size * rng.uniform(0.75, 1.25)))
        message = Message(seq=seq, role="user", content=text)
        history.append(msgspec.structs.replace(message, tokens=COUNTER.message(message)))
    world = World(messages={"t": history}, chain=["t"], spawn={})
    limits = ViewLimits(max_tokens=max_tokens, max_bytes=max_bytes, max_messages=max_messages)
    view, _ = world.build(limits)
    check_view(world, limits, view, 0)

    read = [m for f in world.fetches for m in f.got]
    assert len(read) - len(view) <= max(MIN_CHUNK, world.fetches[-1].limit)
    biggest = max(message_tokens(m) for m in history), max(message_bytes(m) for m in history)
    assert sum(message_tokens(m) for m in read) <= 2 * max_tokens + MIN_CHUNK * biggest[0]
    bytes_per_token = max(message_bytes(m) / message_tokens(m) for m in history)
    if max_bytes >= max_tokens * bytes_per_token:
        assert sum(message_bytes(m) for m in read) <= 2 * max_bytes + MIN_CHUNK * biggest[1]
