"""A property of waits for a person, on a SQLite file: any interleaving of decisions
(approve, edit, deny, repeated or conflicting), expiries, store restarts, new inputs and
outbox runs leaves every call answered exactly once: an approved call by its one run, a
denied or expired one by its result and never run."""

from __future__ import annotations

import asyncio
from pathlib import Path
from tempfile import TemporaryDirectory

import apsw
import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dormant.errors import DecisionConflict
from dormant.records import NewApproval, OutboxOutcome
from dormant.store.sqlite import SQLiteStore
from tests.contract.support import call, plan, take, user
from tests.helpers import FakeClock

WAITS = 3
Op = tuple[str, int, int]
ops = st.lists(
    st.tuples(
        st.sampled_from(["approve", "edit", "deny", "expire", "restart", "input", "run"]),
        st.integers(0, WAITS - 1),
        st.integers(0, 2),
    ),
    max_size=25,
)


async def scenario(db: Path, steps: list[Op]) -> None:
    clock = FakeClock()
    url = f"sqlite:///{db}"
    store = SQLiteStore(url, clock=clock)
    await store.open()
    for n in range(WAITS):
        await store.admit([user(f"t{n}", "k", "x", agent="a")])
        c, load = await take(store, f"t{n}")
        p = plan(c, load, reply="", calls=[call("c", "refund")])
        wait = NewApproval(call_id="c", tool="refund", arguments="{}", deadline=clock.now + 100 * (n + 1))
        await store.commit_slice(msgspec.structs.replace(p, calls=(), approvals=(wait,)))
    ran: list[str] = []

    async def run_outbox() -> None:
        for entry in await store.claim_outbox("w", 100, 60.0):
            ran.append(entry.thread_id)
            done = OutboxOutcome(entry_id=entry.id, token=entry.token or "", kind="done", content="ran")
            await store.finish_outbox([done])

    for action, n, key in steps:
        thread = f"t{n}"
        if action in ("approve", "edit", "deny"):
            status = {"approve": "approved", "edit": "edited", "deny": "denied"}[action]
            try:
                await store.decide_approval(
                    thread, "c", status=status, arguments="{}" if action != "deny" else None,
                    result="no", key=f"{action}{key}",
                )  # fmt: skip
            except DecisionConflict as exc:
                assert exc.first is not None
        elif action == "expire":
            clock.advance(100)
            await store.expire_approvals()
        elif action == "restart":
            await store.close()
            store = SQLiteStore(url, clock=clock)
            await store.open()
        elif action == "input":
            await store.admit([user(thread, f"more{key}", "hello")])
        else:
            await run_outbox()
    clock.advance(1000)  # the end: every wait expired or decided, every approved call run
    await store.expire_approvals()
    await run_outbox()
    waits = {a.thread_id: a.status for a in (await store.approvals(status="all")).items}
    await store.close()
    conn = apsw.Connection(str(db))
    results = dict(
        conn.execute("SELECT thread_id, count(*) FROM inputs WHERE kind = 'tool_result' GROUP BY 1")
    )
    contents = dict(conn.execute("SELECT thread_id, content FROM inputs WHERE kind = 'tool_result'"))
    left = list(conn.execute("SELECT thread_id, status FROM outbox"))
    conn.close()
    assert left == []
    for n in range(WAITS):
        thread = f"t{n}"
        assert waits[thread] in ("approved", "edited", "denied", "expired")
        assert results.get(thread) == 1, f"{thread} answered {results.get(thread, 0)} times"
        runs = ran.count(thread)
        if waits[thread] in ("approved", "edited"):
            assert runs == 1 and contents[thread] == "ran"
        else:
            assert runs == 0 and contents[thread] != "ran"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_every_call_is_answered_exactly_once(steps: list[Op]) -> None:
    with TemporaryDirectory() as tmp:
        asyncio.run(scenario(Path(tmp) / "p.db", steps))
