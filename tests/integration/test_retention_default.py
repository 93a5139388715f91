"""Retention keeps what the user did not ask to drop: by default a day of background
passes (the clock simulated) leaves a 2,000-message thread, tool results and all,
exactly as it was; the long-run policy, one setting away (``Agent(retention=...)`` or
``DORMANT_RETENTION``), prunes the same thread, and its history says so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
from typer.testing import CliRunner

from dormant import Agent, ModelReply, Runtime, ScriptedModel
from dormant.cli.main import app
from dormant.records import CommitPlan, Message, RetentionMark, ToolCall
from dormant.retention.policy import NOTE, RetentionPolicy
from dormant.slices.step import input_message
from dormant.store.base import Store
from tests.contract.support import COUNTER, take, user
from tests.contract.test_summaries import summary_of
from tests.helpers import FakeClock, all_messages
from tests.integration.conftest import fast_settings
from tests.server.support import serve

TURNS = 100  # x 20 messages: a user message, 9 tool calls with their results, a reply
CALLS = 9
DAY = 86_400.0


async def long_thread(store: Store, thread: str, agent: str = "a") -> None:
    """2,000 messages in 100 runs, 900 tool results of 1,000+ characters, and a summary
    covering all but the last 5 runs (what compaction would have written)."""
    for t in range(TURNS):
        await store.admit([user(thread, f"k{t}", f"question {t}", agent=agent)])
        c, load = await take(store, thread)
        seq = load.thread.last_seq
        messages = [input_message(load.inputs[0], seq + 1, 0.0)]
        seq += 1
        for i in range(CALLS):
            call = ToolCall(id=f"c{t}-{i}", name="lookup", arguments="{}")
            messages.append(Message(seq=seq + 1, role="assistant", content="", tool_calls=(call,)))
            body = f"result {t}-{i} " + "x" * 1000
            result = Message(seq=seq + 2, role="tool", content=body, tool_call_id=call.id, name="lookup")
            messages.append(result)
            seq += 2
        messages.append(Message(seq=seq + 1, role="assistant", content=f"answer {t}"))
        last = t == TURNS - 1
        await store.commit_slice(
            CommitPlan(
                thread_id=c.thread_id,
                token=c.token,
                consumed=(load.inputs[0].id,),
                messages=tuple(msgspec.structs.replace(m, tokens=COUNTER.message(m)) for m in messages),
                summary=summary_of(load, load.thread.last_seq - 80) if last else None,
            )
        )


def agent(name: str = "a", **kw: object) -> Agent:
    return Agent(name=name, model=ScriptedModel(lambda req: ModelReply(text="ok")), **kw)  # type: ignore[arg-type]


async def a_day_of_passes(rt: Runtime, clock: FakeClock) -> None:
    """Every background pass of a day (one per minute, the default interval)."""
    loop = rt.retention_loop()
    assert loop.interval_s == 60.0, "the default interval"
    for _ in range(int(DAY / loop.interval_s)):
        clock.advance(loop.interval_s)
        await loop.one_pass()
    assert loop.passes == DAY / 60


async def test_by_default_a_day_of_passes_keeps_all_2000_messages_whole(store_url: str) -> None:
    settings = fast_settings()  # the default retention settings
    async with Runtime(store_url, [agent()], settings=settings) as rt:
        clock = FakeClock()
        rt.clock = clock
        await long_thread(rt.store, "t")
        before = await all_messages(rt.store, "t")
        assert len(before) == 2000
        await a_day_of_passes(rt, clock)
        after = await all_messages(rt.store, "t")
        assert len(after) == 2000
        assert after == before, "every message, every tool result whole"
        assert not any(m.content.endswith(NOTE) for m in after)
        assert await rt.store.retention_mark("t") is None
        assert rt.retention.name == "keep"


async def test_the_long_run_policy_prunes_and_the_history_says_so(store_url: str) -> None:
    async with Runtime(store_url, [agent(retention="long-run")], settings=fast_settings()) as rt:
        clock = FakeClock()
        rt.clock = clock
        await long_thread(rt.store, "t")
        loop = rt.retention_loop()
        while True:
            clock.advance(60)
            before = loop.deleted + loop.shrunk
            await loop.one_pass()
            if loop.deleted + loop.shrunk == before:
                break
        kept = await all_messages(rt.store, "t")
        assert 0 < len(kept) < 2000
        mark = await rt.store.retention_mark("t")
        assert mark is not None
        assert mark.policy == "long-run"
        assert mark.pruned == 2000 - len(kept)
        assert mark.up_to_seq == kept[0].seq - 1
        assert any(m.content.endswith(NOTE) for m in kept), "old tool results cut"


async def prune_long_run(rt: Runtime) -> None:
    """Retention passes under the agent's long-run policy until one changes nothing."""
    loop = rt.retention_loop()
    while True:
        before = loop.deleted + loop.shrunk
        await loop.one_pass()
        if loop.deleted + loop.shrunk == before:
            return


def test_show_and_export_say_what_was_pruned(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/history.db"
    env = {"DORMANT_STORE": url}

    async def build() -> tuple[RetentionMark, int]:
        agents = [agent(retention="long-run"), agent("b")]
        async with Runtime(url, agents, settings=fast_settings()) as rt:
            await long_thread(rt.store, "kept", agent="b")  # agent b: the runtime's policy, keep
            await long_thread(rt.store, "t")
            await prune_long_run(rt)
            mark = await rt.store.retention_mark("t")
            assert mark is not None
            return mark, len(await all_messages(rt.store, "t"))

    mark, stored = asyncio.run(build())
    assert stored == 2000 - mark.pruned
    shown = CliRunner().invoke(app, ["show", "kept", "--store", url, "--limit", "2"], env=env)
    assert shown.exit_code == 0, shown.output
    assert "2000 messages" in shown.output and "pruned" not in shown.output
    shown = CliRunner().invoke(app, ["show", "t", "--store", url, "--limit", "2"], env=env)
    assert shown.exit_code == 0, shown.output
    header = shown.output.splitlines()[0]
    assert f"{stored} messages ({mark.pruned} pruned)" in header, "the header counts no pruned message"
    assert f"pruned: {mark.pruned} message(s), every one up to #{mark.up_to_seq}" in shown.output
    assert "retention policy long-run" in shown.output
    out = tmp_path / "t.jsonl"
    exported = CliRunner().invoke(app, ["export", "t", "--store", url, "--out", str(out)], env=env)
    assert exported.exit_code == 0, exported.output
    assert f"not in this export: pruned: {mark.pruned} message(s)" in exported.output
    assert len(out.read_text().splitlines()) == stored
    whole = CliRunner().invoke(app, ["export", "kept", "--store", url, "--out", str(out)], env=env)
    assert whole.exit_code == 0, whole.output
    assert "not in this export" not in whole.output


async def test_the_messages_route_says_what_was_pruned() -> None:
    async with serve([agent()]) as s, s.client() as c:
        rt = s.runtime
        tenant = await rt.store.tenant("acme")
        # agent x is hosted nowhere: the served runtime's scheduler leaves its thread alone
        await long_thread(rt.store, f"{tenant.id}/t", agent="x")
        await prune_long_run(rt)
        page = (await c.get("/v1/threads/t/messages", params={"limit": 1})).json()
        assert page["pruned"] is None and page["items"][0]["seq"] == 1, "the default keeps everything"
        rt.retention = RetentionPolicy.named("long-run")
        await prune_long_run(rt)
        mark = await rt.store.retention_mark(f"{tenant.id}/t")
        assert mark is not None
        page = (await c.get("/v1/threads/t/messages", params={"limit": 1})).json()
        assert page["pruned"] == {
            "messages": mark.pruned,
            "up_to_seq": mark.up_to_seq,
            "policy": "long-run",
            "pruned_at": mark.pruned_at,
        }
        assert page["items"][0]["seq"] == mark.up_to_seq + 1
        async with s.client(s.key_b) as other:
            assert (await other.get("/v1/threads/t/messages")).status_code == 404
