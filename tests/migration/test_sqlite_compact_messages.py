"""Schema 15 stores messages under their thread's number (``message_rows`` behind the
``messages`` view) and drops the dedup keys' age index: a schema 14 database with
threads, a child, messages with a tool call and its result, pending inputs, dedup keys
and an open outbox entry migrates, and then reads, dedups, grows and deletes as before."""

from __future__ import annotations

from pathlib import Path

import apsw

from dormant.records import NewInput, ViewLimits
from dormant.store.sqlite import SQLiteStore
from tests.contract.support import plan, take, user
from tests.helpers import all_messages

from .test_sqlite_schema import SNAPSHOTS, build, raw, url

CALLS = '[{"id":"c1","name":"f","arguments":"{}"}]'
U = "\x1fu:"  # how a user input's dedup key is stored (apart from tool results' call ids)


def v14_with_data(path: Path) -> None:
    """A schema 14 file as a dormant of that schema left it (rows written directly)."""
    build(path, (SNAPSHOTS / "v14.sql").read_text(), 14)
    conn = apsw.Connection(str(path))
    try:
        for tid, parent, pseq, last in (("p", None, 0, 4), ("q", None, 0, 1), ("p/c", "p", 2, 1)):
            conn.execute(
                "INSERT INTO threads (id, agent, parent_id, parent_seq, last_seq, created_at, updated_at) "
                "VALUES (?, 'a', ?, ?, ?, 1.0, 1.0)",
                (tid, parent, pseq, last),
            )
        rows = [
            ("p", 1, "user", "p1", None, None, None, 1),
            ("p", 2, "assistant", "p2", CALLS, None, None, None),
            ("p", 3, "tool", "p3", None, "c1", "f", 2),
            ("p", 4, "assistant", "p4", None, None, None, None),
            ("q", 1, "user", "q1", None, None, None, 3),
            ("p/c", 1, "user", "c1", None, None, None, 4),
        ]
        conn.executemany(
            "INSERT INTO messages (thread_id, seq, role, content, tool_calls, tool_call_id, name, input_id, "
            "created_at, tokens) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 2.0, 1)",
            rows,
        )
        keys = (
            ("p", U + "k1", 1),
            ("p", "c1", 2),
            ("q", U + "kq", 3),
            ("p/c", U + "kc", 4),
            ("q", U + "kq2", 10),
        )
        for tid, key, input_id in keys:
            conn.execute(
                "INSERT INTO input_keys (thread_id, dedup_key, input_id, admitted_at) VALUES (?, ?, ?, 1.0)",
                (tid, key, input_id),
            )
        conn.execute(
            "INSERT INTO inputs (id, thread_id, dedup_key, kind, priority, not_before, admitted_at, "
            "sort_key, content) VALUES (10, 'q', 'kq2', 'user', 1, 0, 1.0, 1.0, 'q2')"
        )
        conn.execute("UPDATE threads SET ready_key = 1.0, ready_at = 0 WHERE id = 'q'")
        conn.execute(
            "INSERT INTO outbox (thread_id, agent, call_id, tool, arguments, idempotent, available_at, "
            "created_at) VALUES ('q', 'a', 'c9', 'f', '{}', 0, 0, 1.0)"
        )
    finally:
        conn.close()


async def test_a_schema_14_database_with_data_migrates_and_behaves_the_same(tmp_path: Path) -> None:
    db = tmp_path / "v14.db"
    v14_with_data(db)
    store = SQLiteStore(url(db))
    await store.open()
    try:
        assert raw(db, "SELECT version FROM schema_version") == [(15,)]
        history = await all_messages(store, "p")
        assert [(m.seq, m.role, m.content) for m in history] == [
            (1, "user", "p1"),
            (2, "assistant", "p2"),
            (3, "tool", "p3"),
            (4, "assistant", "p4"),
        ]
        assert history[1].tool_calls[0].id == "c1" and history[2].tool_call_id == "c1"
        assert [m.content for m in await all_messages(store, "p/c")] == ["c1"]

        dups = await store.admit([user("p", "k1"), user("q", "kq"), user("q", "kq2")])
        assert all(d.duplicate for d in dups), "keys, pending inputs' keys too, survive"

        c, load = await take(store, "q")  # the pending input, admitted under schema 14
        assert [i.content for i in load.inputs] == ["q2"]
        await store.commit_slice(plan(c, load, reply="q3"))
        assert [m.content for m in await all_messages(store, "q")] == ["q1", "q2", "q3"]

        await store.admit([user("p/c", "kc2", "c2")])
        c, load = await take(store, "p/c", ViewLimits())
        assert [m.content for m in load.view] == ["p1", "p2", "c1"], "a child reads its parent's history"
        await store.commit_slice(plan(c, load, reply="c3"))

        await store.admit([NewInput(thread_id="n", kind="user", dedup_key="kn", content="n1", agent="a")])
        c, load = await take(store, "n")
        await store.commit_slice(plan(c, load, reply="n2"))
        assert [m.content for m in await all_messages(store, "n")] == ["n1", "n2"]
        rids = raw(db, "SELECT id, rid FROM threads ORDER BY rid")
        assert len({r for _, r in rids}) == 4 and all(r is not None for _, r in rids)

        assert await store.delete_thread("p") >= 2, "a parent goes with its child"
        assert raw(db, "SELECT count(*) FROM message_rows") == [(5,)], "q's 3 and n's 2 stay"
    finally:
        await store.close()
