"""Many threads, many turns, through the public Runtime: nothing lost, nothing doubled."""

from __future__ import annotations

import asyncio

from dormant import Agent, NewInput, Runtime, ScriptedModel, ToolContext, tool
from dormant.models import tool_round_trip
from dormant.store.base import Store
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings

THREADS = 200
TURNS = 5


@tool(mode="async", idempotent=True)
async def lookup(q: str, ctx: ToolContext) -> str:
    """Look something up (async, through the outbox)."""
    await asyncio.sleep(0)
    return f"found {q} for {ctx.call_id}"


def agent() -> Agent:
    return Agent(name="a", model=ScriptedModel(tool_round_trip("lookup", {"q": "x"}, "ok")), tools=[lookup])


async def verify(store: Store, threads: list[str], admitted: dict[str, list[int]]) -> None:
    """Every input consumed exactly once, in admission order; every call answered once."""
    status = await store.status()
    assert status.threads_by_status == {"active": len(threads)}
    assert sum(status.backlog_by_priority.values()) == 0
    assert status.outbox_by_status.get("pending", 0) == status.outbox_by_status.get("running", 0) == 0
    assert status.dead_letters == 0
    for thread_id in threads:
        thread = await store.get_thread(thread_id)
        assert (thread.awaiting, thread.failures, thread.error) == (0, 0, None)
        messages = await all_messages(store, thread_id)
        report = check_history(messages, last_seq=thread.last_seq)
        assert report.user_contents == [f"{thread_id} turn {n}" for n in range(TURNS)]
        user_ids = [m.input_id for m in messages if m.role == "user"]
        assert user_ids == admitted[thread_id], "each user input once, in admission order"
        assert report.tool_calls == TURNS
        roles = [m.role for m in messages]
        assert roles == ["user", "assistant", "tool", "assistant"] * TURNS


async def test_many_threads_many_turns(store_url: str) -> None:
    threads = [f"t{i:04d}" for i in range(THREADS)]
    admitted: dict[str, list[int]] = {t: [] for t in threads}
    async with Runtime(store_url, [agent()], settings=fast_settings(concurrency=64)) as rt:
        for n in range(TURNS):
            batch = [
                NewInput(thread_id=t, kind="user", dedup_key=f"turn{n}", content=f"{t} turn {n}", agent="a")
                for t in threads
            ]
            for adm in await rt.admit(batch):
                assert not adm.duplicate
                admitted[adm.thread_id].append(adm.input_id)
            await rt.run_until_idle(timeout=60)
        await verify(rt.store, threads, admitted)
        assert rt.stats.slice_failures == 0 and rt.stats.leases_lost == 0
        assert rt.stats.tool_calls == THREADS * TURNS
        assert rt.stats.slices == 2 * THREADS * TURNS
