"""Double texting: an input that arrives while its thread runs a slice (enqueue, reject,
interrupt, rollback)."""

from __future__ import annotations

import json

from dormant.agent import Agent
from tests.helpers import eventually
from tests.server.support import events, serve
from tests.server.test_events import SlowTalker, collect


async def test_reject_then_rollback_while_a_slice_runs() -> None:
    model = SlowTalker()
    async with serve([Agent(name="assistant", model=model)]) as s, s.client() as c:
        await c.post("/v1/threads", json={"id": "t"})
        async with c.stream("GET", "/v1/threads/t/events") as r:
            stream = events(r)
            await collect(stream, 1, {"status"})
            first = await c.post("/v1/threads/t/inputs", json={"content": "first"})
            assert first.json()["interrupted"] is False
            (_delta,) = await collect(stream, 1, {"delta"})  # the slice runs, blocked mid-reply

            rejected = await c.post("/v1/threads/t/inputs", json={"content": "second", "strategy": "reject"})
            assert rejected.status_code == 409 and rejected.json()["error"]["code"] == "thread_busy"

            third = await c.post("/v1/threads/t/inputs", json={"content": "third", "strategy": "rollback"})
            assert third.status_code == 202 and third.json()["interrupted"] is True
            (rollback,) = await collect(stream, 1, {"rollback"})
            assert json.loads(rollback.data) == {"after": 0, "discarded": len("thinking ")}

            async def running() -> bool:
                return s.runtime.scheduler.active == 1

            await eventually(running)  # the next slice took both inputs
            model.gate.set()
            got = await collect(stream, 3, {"message"})
        assert [json.loads(e.data)["content"] for e in got] == ["first", "third", "thinking done"]
        assert s.runtime.stats.leases_lost == 1


async def test_interrupt_without_a_running_slice_just_enqueues() -> None:
    model = SlowTalker()
    model.gate.set()
    async with serve([Agent(name="assistant", model=model)]) as s, s.client() as c:
        r = await c.post("/v1/threads/t/inputs", json={"content": "x", "strategy": "interrupt"})
        assert r.status_code == 202 and r.json()["interrupted"] is False

        async def replied() -> bool:
            return len((await c.get("/v1/threads/t/messages")).json()["items"]) == 2

        await eventually(replied)
        assert s.runtime.stats.leases_lost == 0
