"""Compaction end to end with scripted models: summaries replace old history in views,
never cut a pending tool call, survive a failing model, and leave children's
inheritance as it was."""

from __future__ import annotations

import asyncio
import itertools
from typing import NoReturn

import pytest

from dormant import Agent, ModelError, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.slices import runner
from dormant.slices.compaction import INSTRUCTION
from dormant.tokens import count_text
from dormant.view import budget
from dormant.view import builder as context
from dormant.view.builder import message_bytes, message_tokens
from tests.helpers import all_messages, check_history, eventually
from tests.integration.conftest import fast_settings

WINDOW = 2_000
FILLER = " ".join(f"word{n}" for n in range(60))  # about 100 tokens
_ids = itertools.count(1)


def is_compaction(req: ModelRequest) -> bool:
    return bool(req.messages) and req.messages[-1].content == INSTRUCTION


def prompt_tokens(req: ModelRequest) -> int:
    summary = count_text(req.summary) if req.summary else 0
    return summary + sum(message_tokens(m) for m in req.messages)


class Recorder:
    """A script that echoes user text and summarizes when asked; keeps every request."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.summaries = 0
        self.fail_compaction = False

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.requests.append(req)
        if is_compaction(req):
            if self.fail_compaction:
                raise ModelError("summarizer is down")
            self.summaries += 1
            return ModelReply(text=f"SUMMARY {self.summaries} through seq {req.messages[-2].seq}")
        return ModelReply(text="echo " + req.messages[-1].content)

    @property
    def turns(self) -> list[ModelRequest]:
        return [r for r in self.requests if not is_compaction(r)]


def agent_for(script: Recorder, **kwargs: object) -> Agent:
    model = ScriptedModel(script, context_window=WINDOW, max_output_tokens=200)
    return Agent(name="a", model=model, builtins=False, **kwargs)  # type: ignore[arg-type]


async def converse(rt: Runtime, thread: str, turns: int, start: int = 0) -> None:
    for n in range(start, start + turns):
        await rt.send(thread, f"message {n}: {FILLER}", key=f"k{n}")
        await rt.run_until_idle(timeout=20)


async def test_a_long_thread_is_compacted_and_views_stay_within_the_window(store_url: str) -> None:
    script = Recorder()
    async with Runtime(store_url, [agent_for(script)], settings=fast_settings()) as rt:
        await converse(rt, "t", 30)
        thread = await rt.thread("t")
        assert rt.stats.compactions >= 2 and rt.stats.compaction_failures == 0
        assert thread.summary_seq > 0
        assert thread.tokens_since_summary <= rt.settings.compaction_share * WINDOW + 400
        history = await all_messages(rt.store, "t")
        assert len(history) == 60, "the originals stay in the store"
        check_history(history)
        for req in script.turns:
            assert prompt_tokens(req) <= WINDOW
        last = script.turns[-1]
        assert last.summary is not None and last.summary.startswith(f"SUMMARY {script.summaries} ")
        assert last.messages[0].seq == thread.summary_seq + 1, "the view starts right after the summary"
        compactions = [r for r in script.requests if is_compaction(r)]
        assert compactions[1].summary is not None and compactions[1].summary.startswith("SUMMARY 1 ")


async def test_an_agent_whose_byte_cap_bounds_its_views_counts_nothing_and_compacts_by_bytes(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_tokenizer(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError("the tokenizer was used")

    monkeypatch.setattr(runner, "TokenCounter", no_tokenizer)
    monkeypatch.setattr(budget, "count_text", no_tokenizer)
    monkeypatch.setattr(context, "count_message", no_tokenizer)
    script = Recorder()
    model = ScriptedModel(script, context_window=128_000, max_output_tokens=200)
    agent = Agent(name="a", model=model, builtins=False)
    view_bytes = 4096  # 4 x 4 KiB is far under what 128k tokens leave: counts decide nothing
    # the share this test's sizes were chosen for (the page manager's default is 0.85)
    settings = fast_settings(view_bytes=view_bytes, compaction_share=0.75)
    async with Runtime(store_url, [agent], settings=settings) as rt:
        assert not rt.limits["a"].counts_tokens
        await converse(rt, "t", 20)  # ~560 bytes a turn: 0.75 x 4 KiB is passed every ~5 turns
        thread = await rt.thread("t")
        assert rt.stats.compactions >= 3 and rt.stats.compaction_failures == 0
        assert thread.tokens == 0 and thread.summary_seq > 0
        history = await all_messages(rt.store, "t")
        assert len(history) == 40 and all(m.tokens == 0 for m in history), "stored uncounted"
        for req in script.turns:
            assert req.messages[0].seq > 1 or req.summary is None
            size = sum(message_bytes(m) for m in req.messages) + (len(req.summary) + 16 if req.summary else 0)
            assert size <= view_bytes, "the byte cap holds"
        summarized = [r for r in script.turns if r.summary is not None]
        assert summarized and all(r.messages[0].seq > 1 for r in summarized)
    monkeypatch.undo()
    # the same history under limits that count: read back and counted when a view needs it
    counted_model = ScriptedModel(script, context_window=2_000, max_output_tokens=200)
    agent = Agent(name="a", model=counted_model, builtins=False)
    async with Runtime(store_url, [agent], settings=settings) as rt:
        assert rt.limits["a"].counts_tokens
        await converse(rt, "t", 1, start=20)
        assert prompt_tokens(script.turns[-1]) <= 2_000
        # its view (the summary and three messages) is small: its bytes prove the fit
        assert (await rt.thread("t")).tokens == 0, "nothing needed a count"


async def test_a_failing_compaction_leaves_the_thread_usable_and_is_retried(store_url: str) -> None:
    script = Recorder()
    script.fail_compaction = True
    async with Runtime(store_url, [agent_for(script)], settings=fast_settings()) as rt:
        await converse(rt, "t", 14)
        thread = await rt.thread("t")
        assert rt.stats.compaction_failures >= 2 and rt.stats.compactions == 0
        assert thread.status == "active" and thread.summary_seq == 0 and thread.failures == 0
        assert len(await all_messages(rt.store, "t")) == 28, "every turn was answered"
        for req in script.turns:
            assert prompt_tokens(req) <= WINDOW, "the view stays within budget without a summary"
        script.fail_compaction = False
        await converse(rt, "t", 1, start=14)
        assert rt.stats.compactions == 1
        assert (await rt.thread("t")).summary_seq > 0


async def test_compaction_never_cuts_a_pending_tool_call(store_url: str) -> None:
    gate = asyncio.Event()
    script = Recorder()

    @tool(mode="async")
    async def fast(q: str) -> str:
        """Answers at once."""
        return f"fast {q}"

    @tool(mode="async")
    async def slow(q: str) -> str:
        """Answers when the test opens the gate."""
        await gate.wait()
        return f"slow {q}"

    def two_calls(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if not is_compaction(req) and last.content.startswith("go"):
            script.requests.append(req)
            calls = (
                ToolCall(id=f"c{next(_ids)}", name="fast", arguments='{"q": "a"}'),
                ToolCall(id=f"c{next(_ids)}", name="slow", arguments='{"q": "b"}'),
            )
            return ModelReply(text="calling both", tool_calls=calls)
        return script(req)

    model = ScriptedModel(two_calls, context_window=WINDOW, max_output_tokens=200)
    agent = Agent(name="a", model=model, builtins=False, tools=[fast, slow])
    # keep almost nothing verbatim: the cut goes as late as the pairing rules allow
    async with Runtime(store_url, [agent], settings=fast_settings(compaction_keep=0.01)) as rt:
        # fill the thread to just under the threshold (a turn is ~260 tokens); the "go"
        # message (~600, ~370 as a view shows it clipped) then passes it, so the slice that
        # takes the fast result (the slow one still pending) is the one that compacts
        threshold = rt.settings.compaction_share * rt.limits["a"].max_tokens
        await converse(rt, "t", 1)
        turns = 1
        while sum(message_tokens(m) for m in await all_messages(rt.store, "t")) + 350 < threshold:
            await converse(rt, "t", 1, start=turns)
            turns += 1
        assert rt.stats.compactions == 0
        runner = asyncio.create_task(rt.run())
        try:
            await rt.send("t", "go " + " ".join([FILLER] * 6), key="go")

            async def fast_answered() -> bool:
                return any(m.content == "fast a" for m in await all_messages(rt.store, "t"))

            await eventually(fast_answered)
            thread = await rt.thread("t")
            assert thread.awaiting == 1
            history = await all_messages(rt.store, "t")
            call_seq = next(m.seq for m in history if m.content == "calling both")
            assert rt.stats.compactions >= 1, "the slice that took the fast result compacted"
            assert thread.summary_seq == call_seq - 1, "the pending call stays right after the summary"
            gate.set()

            async def done() -> bool:
                return not await rt.store.has_work()

            await eventually(done)
        finally:
            rt.stop()
            await runner
        history = await all_messages(rt.store, "t")
        check_history(history)  # every call answered exactly once
        after = script.turns[-1]
        assert [m.content for m in after.messages if m.role == "tool"] == ["fast a", "slow b"]
        assert any(m.content == "calling both" for m in after.messages)


async def test_a_child_spawned_before_a_compaction_keeps_what_it_inherited(store_url: str) -> None:
    script = Recorder()
    child_views: list[list[str]] = []

    def spawning(req: ModelRequest) -> ModelReply:
        last = req.messages[-1]
        if "/" in req.thread_id:
            child_views.append([m.content for m in req.messages])
            return ModelReply(text="child done")
        if not is_compaction(req) and last.role == "user" and last.content.startswith("spawn"):
            call = ToolCall(id=f"s{next(_ids)}", name="spawn_thread", arguments='{"task": "child task"}')
            return ModelReply(text="", tool_calls=(call,))
        return script(req)

    model = ScriptedModel(spawning, context_window=WINDOW * 2, max_output_tokens=200)
    agent = Agent(name="a", model=model)
    async with Runtime(store_url, [agent], settings=fast_settings()) as rt:
        await converse(rt, "p", 3)
        await rt.send("p", "spawn a helper", key="spawn")
        await rt.run_until_idle(timeout=20)
        parent = await all_messages(rt.store, "p")
        (child_id,) = [t.id for t in (await rt.threads()).items if t.parent_id == "p"]
        child = await rt.thread(child_id)
        inherited = [m.content for m in parent if m.seq <= child.parent_seq]
        assert child_views[0] == [*inherited, "child task"]
        await converse(rt, "p", 16, start=3)  # the parent compacts
        assert (await rt.thread("p")).summary_seq > 0
        await rt.send(child_id, "again", key="again")
        await rt.run_until_idle(timeout=20)
        assert child_views[-1][: len(inherited)] == inherited, "the child's inheritance is unchanged"
        assert child_views[-1][len(inherited) :] == ["child task", "child done", "again"]


async def test_a_view_bounded_only_by_its_message_cap_is_compacted(store_url: str) -> None:
    """With DORMANT_VIEW_MESSAGES=6 ten turns made no compaction, and older
    messages silently fell out of the view with no summary covering them."""
    script = Recorder()
    model = ScriptedModel(script, context_window=128_000, max_output_tokens=200)
    agent = Agent(name="a", model=model, builtins=False)
    async with Runtime(store_url, [agent], settings=fast_settings(view_messages=6)) as rt:
        await converse(rt, "t", 10)
        assert rt.stats.compactions >= 1 and rt.stats.compaction_failures == 0
        assert (await rt.thread("t")).summary_seq > 0
        covered = 0  # the last seq the summary each request was built on covers
        for req in script.requests:
            if req.summary is not None:
                covered = int(req.summary.rsplit(" ", 1)[1])
            own = [m for m in req.messages if m.content != INSTRUCTION]
            assert own[0].seq == covered + 1, "no message left the view without a summary covering it"
            if is_compaction(req):
                continue
            assert [m.seq for m in own] == list(range(covered + 1, own[-1].seq + 1)), "no gap"
