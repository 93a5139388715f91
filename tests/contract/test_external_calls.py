"""Contract: client tools and external calls, the durable wait no dispatcher runs.

A thread's client tools come with its admitted inputs; a call to one is an outbox entry
of status ``external``: no claim ever leases it, it is not work to wait for, and the
client's answer (:meth:`Store.complete_call`) ends it exactly once.
"""

from __future__ import annotations

import asyncio
import json

from dormant.agent import Agent
from dormant.metrics import RuntimeStats
from dormant.models.scripted import ScriptedModel, echo_script
from dormant.records import NewCall
from dormant.slices.dispatcher import Dispatcher
from dormant.store.base import Store
from dormant.tools.spec import tool
from tests.contract.support import plan, take, user
from tests.helpers import FakeClock, all_messages

TOOLS = json.dumps(
    [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
)


def external(call_id: str, name: str = "get_weather") -> NewCall:
    return NewCall(call_id=call_id, tool=name, arguments='{"city": "Paris"}', external=True)


async def waiting_on_the_client(store: Store, thread_id: str = "t1") -> None:
    """``thread_id``'s slice asked the client's ``get_weather`` (call ``x1``)."""
    await store.admit([user(thread_id, "k1", tools=TOOLS)])
    c, load = await take(store, thread_id)
    await store.commit_slice(plan(c, load, reply="", calls=[external("x1")]))


async def test_an_input_with_tools_sets_its_threads_client_tools(store: Store) -> None:
    await store.admit([user("t1", "k1", tools=TOOLS)])
    assert (await store.get_thread("t1")).client_tools == TOOLS
    # a duplicate changes nothing, an input without tools leaves them, "[]" clears them
    await store.admit([user("t1", "k1", tools="[]")])
    await store.admit([user("t1", "k2")])
    assert (await store.get_thread("t1")).client_tools == TOOLS
    await store.admit([user("t1", "k3", tools="[]")])
    assert (await store.get_thread("t1")).client_tools is None


async def test_an_external_call_is_a_wait_no_claim_takes(store: Store) -> None:
    await waiting_on_the_client(store)
    (entry,) = (await store.list_outbox()).items
    assert (entry.call_id, entry.tool, entry.status) == ("x1", "get_weather", "external")
    assert (await store.get_thread("t1")).awaiting == 1
    assert await store.claim_outbox("w", 10, 60.0) == [], "no claim leases an external call"
    assert await store.claim_outbox("w", 10, 60.0, tools=[("a", "get_weather")]) == []
    assert await store.claim_threads("w", 10, 60.0) == [], "the thread waits"
    assert not await store.has_work(), "an external call is not work of this process"
    status = await store.status()
    assert status.outbox_by_status.get("external") == 1 and status.dead_letters == 0
    assert (await store.list_outbox(status="external")).items == (entry,)


async def test_the_clients_answer_ends_the_wait_once(store: Store) -> None:
    await waiting_on_the_client(store)
    first = await store.complete_call("t1", "x1", "sunny")
    again = await store.complete_call("t1", "x1", "sunny")  # a retried answer
    assert not first.duplicate and again.duplicate and again.input_id == first.input_id
    assert (await store.list_outbox()).items == ()
    c, load = await take(store, "t1")
    assert [(i.kind, i.call_id, i.content, i.tool_name) for i in load.inputs] == [
        ("tool_result", "x1", "sunny", "get_weather")
    ]
    await store.commit_slice(plan(c, load, reply="weather: sunny"))
    assert (await store.get_thread("t1")).awaiting == 0
    tools = [m for m in await all_messages(store, "t1") if m.role == "tool"]
    assert [(m.tool_call_id, m.content) for m in tools] == [("x1", "sunny")]


async def test_an_unanswered_external_call_stays_a_wait(store: Store, clock: FakeClock) -> None:
    await waiting_on_the_client(store)
    clock.advance(7 * 86400.0)  # a week: no lease to expire, nothing reconciles it
    assert await store.claim_outbox("w", 10, 60.0) == []
    (entry,) = (await store.list_outbox()).items
    thread = await store.get_thread("t1")
    assert entry.status == "external" and thread.status == "active" and thread.awaiting == 1


async def test_the_dispatcher_never_claims_an_external_call(store: Store, clock: FakeClock) -> None:
    ran: list[str] = []

    @tool(mode="async", name="get_weather")
    async def same_name(city: str) -> str:  # even a hosted tool of that name is not run
        ran.append(city)
        return "from the dispatcher"

    agents = {"a": Agent(name="a", model=ScriptedModel(echo_script), tools=[same_name])}
    await waiting_on_the_client(store)
    stats = RuntimeStats()
    dispatcher = Dispatcher(
        store,
        agents,
        stats,
        worker="w1",
        concurrency=4,
        max_attempts=3,
        retry_base_s=0.01,
        retry_max_s=0.1,
        poll_s=0.01,
        max_result_bytes=65536,
        clock=clock,
        on_result=lambda: None,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(dispatcher.run(stop))
    await asyncio.sleep(0.3)  # many polls
    stop.set()
    await task
    assert ran == [] and stats.tool_calls == 0
    (entry,) = (await store.list_outbox()).items
    assert entry.status == "external" and entry.attempts == 0
