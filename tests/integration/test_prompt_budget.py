"""The prompt budget: every request a model receives fits its window, as a
server counts it.

Random histories and random new inputs (ASCII, emoji, CJK, JSON, megabyte messages,
model replies with 1-3 inline tool calls and their results, compactions) run through a
real :class:`~dormant.runtime.Runtime` on the in-RAM store. Each request the model
receives is rendered as the OpenAI-compatible adapter sends it and counted
independently with tiktoken (``o200k_base``): every message (role, content, tool-call
names and arguments) plus the adapter's per-message framing, the reply priming, and
the tool schemas as JSON. The count never exceeds ``context_window -
max_output_tokens``, and no tool call is ever shown without its results.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dormant.agent import Agent
from dormant.config import Settings
from dormant.models.base import OPENAI_CHAT, ModelReply, ModelRequest
from dormant.models.openai import OpenAIChatModel
from dormant.models.scripted import ScriptedModel
from dormant.records import Message, ToolCall
from dormant.runtime import Runtime
from dormant.slices import compaction
from dormant.tokens import count_message, encoding
from dormant.tools.spec import tool

ENC = encoding("o200k_base")  # tiktoken's Encoding on the bundled o200k_base ranks
WIRE = OpenAIChatModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="unused")
SYSTEM = "You are a careful assistant. Answer briefly and use the lookup tool when asked."

WORDS = ("alpha", "beta", "gamma", "río", "数据", "モデル", "🙂", "🚀", "naïve", "x1", "{", '"k"', "\n")


def _tokens(text: str) -> int:
    return len(ENC.encode_ordinary(text)) if text else 0


def server_count(request: ModelRequest) -> int:
    """Prompt tokens of ``request`` as an OpenAI-compatible server sees the adapter's body."""
    body = WIRE.request_body(request)
    total = OPENAI_CHAT.reply
    for message in body["messages"]:
        total += OPENAI_CHAT.message + _tokens(message["role"]) + _tokens(message.get("content") or "")
        for call in message.get("tool_calls", ()):
            total += _tokens(call["function"]["name"]) + _tokens(call["function"]["arguments"])
    if body.get("tools"):
        total += _tokens(json.dumps(body["tools"]))
    return total


def unpaired(request: ModelRequest) -> list[str]:
    """Tool calls shown without all their results, and results shown without their call."""
    problems: list[str] = []
    open_calls: set[str] = set()
    for message in request.messages:
        if message.role == "tool":
            if message.tool_call_id not in open_calls:
                problems.append(f"result {message.tool_call_id} without its call")
            open_calls.discard(message.tool_call_id or "")
        else:
            problems.extend(f"call {c} without its result" for c in sorted(open_calls))
            open_calls = {call.id for call in message.tool_calls}
    problems.extend(f"call {c} without its result" for c in sorted(open_calls))
    return problems


@st.composite
def texts(draw: st.DrawFn) -> str:
    """ASCII, emoji, CJK, JSON, or a large text of mixed words (up to about a megabyte)."""
    kind = draw(st.sampled_from(["ascii", "emoji", "cjk", "json", "words", "big"]))
    if kind == "ascii":
        return draw(st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=300))
    if kind == "emoji":
        return draw(st.text(st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), max_size=200))
    if kind == "cjk":
        return draw(st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), max_size=400))
    if kind == "json":
        value = draw(
            st.recursive(
                st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                lambda inner: (
                    st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5)
                ),
                max_leaves=40,
            )
        )
        return json.dumps(value, ensure_ascii=draw(st.booleans()))
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=30))
    pattern = " ".join(words) + " "
    size = draw(st.integers(1_000, 12_000) if kind == "words" else st.integers(50_000, 1_000_000))
    chars = size * len(pattern) // len(pattern.encode())  # at most ``size`` UTF-8 bytes
    return (pattern * (chars // len(pattern) + 1))[:chars]


@dataclass
class Round:
    """One model round of a step: 1-3 inline tool calls with their results, or the final text."""

    results: list[str] = field(default_factory=list)
    text: str = ""

    def __repr__(self) -> str:  # sizes only: a failing example can hold megabytes
        return f"Round(results={[_size(r) for r in self.results]}, text={_size(self.text)})"


@dataclass
class Step:
    """One user input and the model rounds of the slice that consumes it."""

    text: str
    rounds: list[Round]

    def __repr__(self) -> str:
        return f"Step(text={_size(self.text)}, rounds={self.rounds!r})"


def _size(text: str) -> str:
    return repr(text) if len(text) <= 60 else f"<{len(text)} chars: {text[:30]!r}...>"


@st.composite
def short_texts(draw: st.DrawFn) -> str:
    """A text of 20-800 mixed words: many of them fill a view to within a few tokens."""
    words = draw(st.lists(st.sampled_from(WORDS), min_size=1, max_size=10))
    pattern = " ".join(words) + " "
    return pattern * draw(st.integers(1, 80))


@st.composite
def steps(draw: st.DrawFn) -> list[Step]:
    """A few steps of any texts, or many short ones (histories that fill the window)."""
    if draw(st.booleans()):
        return [
            Step(text=draw(short_texts()), rounds=[Round(text=draw(short_texts()))])
            for _ in range(draw(st.integers(10, 40)))
        ]
    out = []
    for _ in range(draw(st.integers(1, 6))):
        rounds = [
            Round(results=draw(st.lists(texts(), min_size=1, max_size=3)))
            for _ in range(draw(st.integers(0, 2)))
        ]
        rounds.append(Round(text=draw(texts())))
        out.append(Step(text=draw(texts()), rounds=rounds))
    return out


class Recorder:
    """The scripted model's script: plays the planned rounds, records every request."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.planned: deque[Round] = deque()
        self.results: dict[str, str] = {}
        self.calls = 0

    def __call__(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if request.messages and request.messages[-1].content == compaction.INSTRUCTION:
            return ModelReply(text="Summary: the user asked questions; answers were given. " * 8)
        planned = self.planned.popleft() if self.planned else Round(text="ok")
        if not planned.results:
            return ModelReply(text=planned.text)
        calls = []
        for result in planned.results:
            self.calls += 1
            key = f"k{self.calls}"
            self.results[key] = result
            calls.append(ToolCall(id=f"c{self.calls}", name="lookup", arguments=json.dumps({"key": key})))
        return ModelReply(text="", tool_calls=tuple(calls))


def _agent(recorder: Recorder, window: int, max_output: int) -> Agent:
    @tool
    async def lookup(key: str) -> str:
        """Look a key up."""
        return recorder.results[key]

    model = ScriptedModel(recorder, context_window=window, max_output_tokens=max_output)
    return Agent(name="a", model=model, system_prompt=SYSTEM, tools=[lookup])


def _settings(compact: bool) -> Settings:
    share = 0.75 if compact else 0
    return Settings.build(store="memory://", concurrency=2, poll_s=0.01, compaction_share=share)


async def _run(plan: Sequence[Step], window: int, max_output: int, compact: bool = True) -> Recorder:
    recorder = Recorder()
    async with Runtime(
        "memory://", [_agent(recorder, window, max_output)], settings=_settings(compact)
    ) as rt:
        for i, step in enumerate(plan):
            recorder.planned.extend(step.rounds)
            await rt.send("t", step.text, key=f"s{i}")
            await rt.run_until_idle(timeout=60)
        thread = await rt.thread("t")
        assert thread.status != "failed", thread
    return recorder


def check(recorder: Recorder, window: int, max_output: int) -> None:
    assert recorder.requests
    for request in recorder.requests:
        assert server_count(request) <= window - max_output
        assert unpaired(request) == []


BUDGETS = st.sampled_from([(8192, 1024), (4096, 512), (16384, 4096), (32768, 2048)])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(plan=steps(), budget=BUDGETS)
@example(plan=[Step(text="word " * 60_000, rounds=[Round(text="ok")])], budget=(8192, 1024))
def test_every_request_fits_the_window_as_a_server_counts_it(
    plan: list[Step], budget: tuple[int, int]
) -> None:
    window, max_output = budget
    check(asyncio.run(_run(plan, window, max_output)), window, max_output)


def test_a_300k_message_is_clipped_on_the_slice_that_consumes_it() -> None:
    """The issue's reproduction: 8,192-token window, 1,024 output, one 300,000-character send."""
    text = ("the quick brown fox jumps over the lazy dog " * 7000)[:300_000]
    recorder = asyncio.run(_run([Step(text=text, rounds=[Round(text="ok")])], 8192, 1024))
    [request] = recorder.requests
    assert server_count(request) <= 8192 - 1024
    [shown] = request.messages
    assert "characters cut from the middle of this message" in shown.content
    assert shown.content.startswith(text[:1000]) and shown.content.endswith(text[-1000:])


def test_inline_rounds_that_outgrow_the_window_drop_the_oldest_messages_not_the_pairs() -> None:
    """Big tool results over several rounds: each request still fits and keeps its pairs."""
    big = ("result line with some words " * 400)[:10_000]
    plan = [
        Step(
            text="look it all up",
            rounds=[Round(results=[big] * 3), Round(results=[big] * 2), Round(text="done")],
        )
    ]
    recorder = asyncio.run(_run(plan, 8192, 1024))
    assert len(recorder.requests) == 3
    check(recorder, 8192, 1024)
    last = recorder.requests[-1]
    assert last.messages[-1].role == "tool"


def _stored(messages: Sequence[Message]) -> int:
    return sum(count_message(m.role, m.content, tool_calls=m.tool_calls, name=m.name) for m in messages)


def test_a_request_filled_to_the_last_token_of_its_budget_fits_once_framed() -> None:
    """History plus the new input fill ViewLimits.max_tokens exactly: the system message,
    the reply priming, the tool schemas and the margin must all have been taken off."""
    window, max_output = 4096, 512

    async def scenario() -> tuple[Recorder, int, str]:
        recorder = Recorder()
        async with Runtime(
            "memory://", [_agent(recorder, window, max_output)], settings=_settings(False)
        ) as rt:
            limit = rt.limits["a"].max_tokens
            turns = total = 0
            while total < 0.8 * limit:
                recorder.planned.append(Round(text="ok"))
                await rt.send("t", "alpha beta gamma delta " * 25, key=f"s{turns}")
                await rt.run_until_idle(timeout=60)
                turns += 1
                total = _stored((await rt.history("t", limit=1000)).items)
            words = limit - total - 4  # a user message costs 3 + 1 (role) + its words here
            last = " ".join(["alpha"] * words)
            assert count_message("user", last) == limit - total
            recorder.planned.append(Round(text="ok"))
            await rt.send("t", last, key="last")
            await rt.run_until_idle(timeout=60)
        return recorder, 2 * turns + 1, last

    recorder, shown, last = asyncio.run(scenario())
    final = recorder.requests[-1]
    assert len(final.messages) == shown and final.messages[-1].content == last, "nothing dropped or cut"
    assert server_count(final) <= window - max_output
    # to the token: all the prompt budget (window less output less the 2 % margin) but
    # the framing kept for a summary, which this thread does not have
    assert server_count(final) == int((window - max_output) * 0.98) - OPENAI_CHAT.summary


def test_messages_are_counted_as_written_once_bytes_no_longer_prove_the_fit() -> None:
    """A young thread's views are proven by their bytes (nothing counted); once a view's
    byte bound passes the budget, what the thread writes is counted, exactly, and stored."""

    async def scenario() -> tuple[Recorder, tuple[Message, ...], bool]:
        recorder = Recorder()
        async with Runtime("memory://", [_agent(recorder, 4096, 512)], settings=_settings(False)) as rt:
            for i in range(40):
                recorder.planned.append(Round(text="ok"))
                await rt.send("t", "alpha beta gamma delta " * 25, key=f"s{i}")
                await rt.run_until_idle(timeout=60)
            history = (await rt.history("t", limit=1000)).items
            return recorder, history, rt.limits["a"].counts_tokens

    recorder, history, counts = asyncio.run(scenario())
    check(recorder, 4096, 512)
    assert counts
    assert history[0].tokens == 0 and history[1].tokens == 0, "proven by bytes: not counted"
    assert history[-1].tokens > 0 and history[-2].tokens > 0, "near the budget: counted as written"
    for m in history:
        assert m.tokens in (0, count_message(m.role, m.content, tool_calls=m.tool_calls, name=m.name))
