"""Memory in the agent loop end to end with the scripted model: a fact told in
one thread is recalled in another thread of the same subject, a correction supersedes
it, a different subject sharing the phone never sees it, a failed slice leaves no
memory, and the registers commit with the slice."""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall, tool
from dormant.errors import ModelError
from dormant.memory import HashingEmbedder
from dormant.memory.facts import MARKER
from dormant.slices import compaction
from dormant.store.journal import Recovered, StateJournal
from dormant.subject import SubjectOptions
from dormant.view.pages import PagePolicy
from dormant.view.sections import MEMORIES_HEADER, STATE_HEADER
from tests.integration.conftest import fast_settings

PHONE = "+1 555 0100"
_ids = count()


class Script:
    """``remember KEY: TEXT`` -> remember(TEXT, tags={key: KEY}); ``order ID`` ->
    set_state(order_id, ID); ``explode`` -> remember, then fail the next round;
    anything else -> "ok". Every request is kept."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []
        self.explode = True

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.requests.append(req)
        last = req.messages[-1]
        if last.role == "user" and last.content.startswith("remember "):
            key, text = last.content.removeprefix("remember ").split(": ", 1)
            args = {"text": text, "tags": {"key": key, "type": "profile"}}
            return ModelReply(
                text="",
                tool_calls=(ToolCall(id=f"c{next(_ids)}", name="remember", arguments=json.dumps(args)),),
            )
        if last.role == "user" and last.content.startswith("order "):
            args = {"key": "order_id", "value": last.content.split()[-1]}
            return ModelReply(
                text="",
                tool_calls=(ToolCall(id=f"c{next(_ids)}", name="set_state", arguments=json.dumps(args)),),
            )
        if last.role == "user" and last.content.startswith("explode"):
            args = {"text": "the exploding fact", "tags": {}}
            return ModelReply(
                text="",
                tool_calls=(ToolCall(id=f"c{next(_ids)}", name="remember", arguments=json.dumps(args)),),
            )
        if (
            last.role == "tool"
            and last.name == "remember"
            and "exploding" in req.messages[-2].tool_calls[0].arguments
        ):
            raise ModelError("the model broke after the tool ran", retryable=False)
        return ModelReply(text="ok")


def agent(script: Script) -> Agent:
    return Agent(
        name="a", model=ScriptedModel(script), subject=SubjectOptions(long_term=frozenset({"language"}))
    )


def shown(req: ModelRequest) -> str:
    return req.summary or ""


async def say(rt: Runtime, thread: str, text: str, device: str) -> None:
    await rt.send(thread, text, identity={"phone": PHONE, "device": device})
    await rt.run_until_idle(timeout=30)


async def test_memories_cross_threads_of_one_subject_only(store_url: str) -> None:
    script = Script()
    async with Runtime(
        store_url, [agent(script)], settings=fast_settings(), memory_embedder=HashingEmbedder(64)
    ) as rt:
        await say(rt, "a", "remember shipping_address: ships to 1 Main Street", "ios-1")
        await say(rt, "b", "where do my parcels go, which street", "ios-1")
        assert "1 Main Street" in shown(script.requests[-1]), "told in A, recalled in B"
        assert MEMORIES_HEADER in shown(script.requests[-1])
        await say(rt, "a", "remember shipping_address: ships to 2 Oak Avenue", "ios-1")
        await say(rt, "c", "which street do parcels go to", "ios-1")
        last = shown(script.requests[-1])
        assert "2 Oak Avenue" in last and "1 Main Street" not in last, "superseded: no longer shown"
        await say(rt, "d", "which street do parcels go to", "android-2")
        other = shown(script.requests[-1])
        assert "Oak" not in other and "Main" not in other, "same phone, other device: another subject"
        subject = await rt.memory.bind({"phone": PHONE, "device": "ios-1"})
        found = await rt.memory.recall([subject], "street", k=5, history=True)
        assert len(found.hits) == 2


async def test_a_failed_slice_leaves_no_memory_and_registers_commit_with_the_slice(store_url: str) -> None:
    script = Script()
    async with Runtime(
        store_url, [agent(script)], settings=fast_settings(), memory_embedder=HashingEmbedder(64)
    ) as rt:
        await say(rt, "t", "explode now", "ios-1")
        thread = await rt.thread("t")
        assert thread.status == "failed"
        subject = await rt.memory.bind({"phone": PHONE, "device": "ios-1"})
        assert (await rt.memory.recall([subject], "exploding fact", k=5)).hits == ()
        await say(rt, "u", "order ORD-7892", "ios-1")
        registers = await rt.registers("u")
        assert registers["subject"] == subject
        assert registers["short_term"] == {"order_id": "ORD-7892"}
        await say(rt, "u", "and what about it", "ios-1")
        assert STATE_HEADER in shown(script.requests[-1]) and "ORD-7892" in shown(script.requests[-1])
        for n in range(3):
            await say(rt, "u", f"small talk {n}", "ios-1")
        assert "ORD-7892" not in shown(script.requests[-1]), "three turns later the anchor is gone"
        assert (await rt.registers("u"))["short_term"] == {}


async def test_slices_read_the_registers_from_their_load_never_from_a_replay(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = Script()
    replays: list[str] = []
    recover = StateJournal.recover

    async def counted(self: StateJournal, thread_id: str) -> Recovered:
        replays.append(thread_id)
        return await recover(self, thread_id)

    monkeypatch.setattr(StateJournal, "recover", counted)
    async with Runtime(
        store_url, [agent(script)], settings=fast_settings(), memory_embedder=HashingEmbedder(64)
    ) as rt:
        await say(rt, "u", "order ORD-7892", "ios-1")
        await say(rt, "u", "and what about it", "ios-1")
        assert "ORD-7892" in shown(script.requests[-1])
        assert replays == [], "the thread row carried the registers"


async def test_an_agent_without_a_subject_never_touches_memory() -> None:
    script = Script()
    plain = Agent(name="a", model=ScriptedModel(script))
    async with Runtime("memory://", [plain], settings=fast_settings()) as rt:
        assert rt.runner.sections["a"] == (0, 0)
        await rt.send("t", "remember k: v")
        await rt.run_until_idle(timeout=30)
        assert rt._memory is None, "memory was never opened"
        assert "remember" not in {s["function"]["name"] for s in script.requests[0].tools}


async def test_compaction_extracts_facts_and_moves_structured_results_out(tmp_path: Path) -> None:
    """One compaction call returns the summary and the facts; the tool results of a
    structured class that it covers become memory records; another thread of the
    subject recalls both. The compaction request carries the facts instruction only
    for an agent with a subject."""
    requests: list[ModelRequest] = []

    @tool
    def ticket(n: int) -> str:
        """Look a support ticket up."""
        return json.dumps({"ticket": f"T-{n}", "status": "refund approved", "order": f"ORD-{n}"})

    def script(req: ModelRequest) -> ModelReply:
        requests.append(req)
        last = req.messages[-1] if req.messages else None
        if last is not None and last.content == compaction.INSTRUCTION:
            facts_json = json.dumps(
                [{"text": "The customer prefers email", "key": "contact_channel", "kind": "preference"}]
            )
            return ModelReply(text=f"SUMMARY of the talk\n{MARKER}\n{facts_json}")
        if last is not None and last.role == "user" and last.content.startswith("ticket"):
            args = json.dumps({"n": int(last.content.split()[1])})
            return ModelReply(
                text="", tool_calls=(ToolCall(id=f"c{next(_ids)}", name="ticket", arguments=args),)
            )
        return ModelReply(text="ok " + "filler words " * 40)

    model = ScriptedModel(script, context_window=4096, max_output_tokens=256)
    pages = PagePolicy(classes={"ticket": "structured"})
    agent = Agent(name="a", model=model, tools=[ticket], pages=pages, subject=SubjectOptions())
    url = f"sqlite:///{tmp_path}/d.db"
    async with Runtime(url, [agent], settings=fast_settings(), memory_embedder=HashingEmbedder(64)) as rt:
        await say(rt, "a", "ticket 7", "ios-1")
        n = 0
        while rt.stats.compactions == 0 and n < 40:
            await say(rt, "a", f"tell me more {n} " + "words " * 60, "ios-1")
            n += 1
        assert rt.stats.compactions >= 1 and rt.stats.facts_found >= 2
        asked = [r for r in requests if r.messages and r.messages[-1].content == compaction.INSTRUCTION]
        assert MARKER in asked[0].system
        subject = await rt.memory.bind({"phone": PHONE, "device": "ios-1"})
        texts = [h.record.text for h in (await rt.memory.recall([subject], "email refund ticket", k=10)).hits]
        assert "The customer prefers email" in texts
        assert any("T-7" in t for t in texts), "the structured result moved out"
        await say(rt, "b", "how should we contact me", "ios-1")
        assert "prefers email" in shown(requests[-1])


async def test_requests_with_full_sections_fit_the_window_as_a_server_counts_it() -> None:
    """The memories and state sections take their shares of the budget, not more: with
    long CJK and emoji memories and registers, every request still fits."""
    from tests.integration.test_prompt_budget import server_count

    requests: list[ModelRequest] = []

    def script(req: ModelRequest) -> ModelReply:
        requests.append(req)
        last = req.messages[-1]
        if last.role == "user" and last.content.startswith("order"):
            args = json.dumps({"key": "order_id", "value": "数据🙂" * 60})
            return ModelReply(
                text="", tool_calls=(ToolCall(id=f"c{next(_ids)}", name="set_state", arguments=args),)
            )
        return ModelReply(text="ok " * 50)

    window, output = 4096, 512
    model = ScriptedModel(script, context_window=window, max_output_tokens=output)
    subject_agent = Agent(name="a", model=model, subject=SubjectOptions(recall_k=20))
    async with Runtime(
        "memory://", [subject_agent], settings=fast_settings(), memory_embedder=HashingEmbedder(64)
    ) as rt:
        key = await rt.memory.bind({"phone": PHONE, "device": "ios-1"})
        for n in range(20):
            await rt.memory.add(key, f"order {n} note " + "数据モデル🚀 " * 120, tags={"n": n})
        await say(rt, "t", "order something", "ios-1")
        for n in range(12):
            await say(rt, "t", f"order {n} details " + "word " * 150, "ios-1")
        assert any(MEMORIES_HEADER in shown(r) for r in requests) and any(
            STATE_HEADER in shown(r) for r in requests
        )
        for req in requests:
            assert server_count(req) <= window - output
