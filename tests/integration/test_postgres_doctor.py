"""`dormant doctor` on PostgreSQL: the same checks and exit codes as on SQLite where they
apply (schema, leases, backlog, outbox, waiting and failed threads), and a server's own:
the workers' heartbeats, amcheck on the store's indexes, replication. It reads through a
plain read-only connection (a store the runtime would refuse still gets examined) and
never shows the URL's password."""

from __future__ import annotations

import psycopg
import pytest

from dormant.errors import DormantError
from dormant.ops.doctor import diagnose, render
from dormant.records import CommitPlan, Message, NewCall, NewInput, ToolCall, ViewLimits
from dormant.store.health import Report
from dormant.store.postgres import PostgresStore, doctor_sql
from dormant.store.postgres.doctor import PgFacts
from dormant.store.postgres.judge import judge_postgres
from dormant.store.postgres.schema import SCHEMA_VERSION

SECRET = "s3cret-pw-xyz"


def levels(report: Report) -> dict[str, str]:
    return {f.check: f.level for f in report.findings}


def text(report: Report) -> str:
    return "\n".join(str(line) for line in render(report)) + repr(report.as_json())


def with_password(url: str) -> str:
    """The same URL with a password (the test server trusts local users: it is ignored)."""
    name, at, rest = url.partition("@")
    assert at and name.count(":") <= 2, url
    return f"{name.rstrip(':')}:{SECRET}@{rest}"


def user(thread: str) -> NewInput:
    return NewInput(thread_id=thread, kind="user", dedup_key="k", content="hi", agent="a")


async def test_a_healthy_store_and_a_broken_one(pg_url: str) -> None:
    url = with_password(pg_url)
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    try:
        await store.admit([user("ok")])
        (claim,) = await store.claim_threads("w-live", 1, 30.0)
        load = await store.load_slice(claim, ViewLimits())
        await store.commit_slice(
            CommitPlan(
                thread_id="ok",
                token=claim.token,
                consumed=(load.inputs[0].id,),
                messages=(
                    Message(seq=1, role="user", content="hi", input_id=load.inputs[0].id),
                    Message(
                        seq=2,
                        role="assistant",
                        content="",
                        tool_calls=(ToolCall(id="c1", name="charge", arguments="{}"),),
                    ),
                ),
                calls=(NewCall(call_id="c1", tool="charge", arguments="{}"),),
                awaiting=1,
            )
        )
        report = diagnose(url)
        assert report.exit_code == 0, text(report)
        found = levels(report)
        assert set(found) >= {
            "server",
            "replication",
            "schema",
            "workers",
            "leases",
            "backlog",
            "outbox",
            "threads",
        }
        assert found["amcheck"] in ("ok", "info")
        assert f"schema version {SCHEMA_VERSION}" in text(report)
        assert SECRET not in text(report) and "***" in report.store

        # a dead worker: its thread lease is live by the clock, but it stopped beating
        await store.admit([user("held")])
        await store.claim_threads("w-gone", 1, 600.0)
    finally:
        await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE workers SET heartbeat_at = now() - interval '1 minute' WHERE id = 'w-gone'")
    report = diagnose(url)
    assert report.exit_code == 3, text(report)
    assert levels(report)["leases"] == "warn" and levels(report)["workers"] == "warn", text(report)
    assert "held (held by w-gone)" in text(report)
    assert "w-gone" in text(report) and "1 thread and 0 call lease(s)" in text(report)

    # rule 5 broken behind the store's back: a call given up without its answer
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE outbox SET status = 'unknown'")
    report = diagnose(url)
    assert report.exit_code == 1 and levels(report)["outbox"] == "fail", text(report)
    assert "ok call c1 (unknown)" in text(report)
    # ...and a thread waiting on a result no call will bring
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DELETE FROM outbox")
    report = diagnose(url)
    assert levels(report)["waiting threads"] == "fail", text(report)

    # a newer schema than this dormant's: the runtime refuses it; doctor still reads it
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("UPDATE schema_version SET version = version + 1")
    with pytest.raises(DormantError):
        newer = PostgresStore(pg_url, pool_size=1)
        try:
            await newer.open()
        finally:
            await newer.close()
    report = diagnose(url)
    assert levels(report)["schema"] == "fail" and "newer than this dormant's" in text(report)
    with psycopg.connect(pg_url, autocommit=True) as conn:  # doctor wrote nothing
        assert conn.execute("SELECT status FROM threads WHERE id = 'ok'").fetchone() == ("active",)


async def test_amcheck_verifies_the_store_indexes_where_installed(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(pg_url, pool_size=1)
    await store.open()
    await store.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        if conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'amcheck'").fetchone() is None:
            pytest.skip("this server has no amcheck extension")
        conn.execute("CREATE EXTENSION IF NOT EXISTS amcheck SCHEMA public")
    report = diagnose(pg_url)
    assert levels(report)["amcheck"] == "ok", text(report)
    assert int(report.facts["amcheck_indexes"]) >= 10
    quick = diagnose(pg_url, quick=True)
    assert "amcheck" not in levels(quick)
    # an index check that fails is damage: fail, with the index named
    monkeypatch.setattr(doctor_sql, "BT_CHECK", doctor_sql.BT_CHECK + " WHERE 1 / 0 = 0")
    report = diagnose(pg_url)
    assert levels(report)["amcheck"] == "fail" and report.exit_code == 1, text(report)
    assert "division by zero" in text(report) and "api_keys_pkey" in text(report)
    assert f"damage in {report.facts['amcheck_indexes']} of" in text(report)


def test_an_unreachable_server_fails_without_showing_the_password() -> None:
    url = f"postgresql://postgres:{SECRET}@127.0.0.1:1/postgres?connect_timeout=2"
    report = diagnose(url)
    assert report.exit_code == 1 and levels(report) == {"connect": "fail"}, text(report)
    assert SECRET not in text(report)


def test_not_a_dormant_schema(pg_url: str) -> None:
    report = diagnose(pg_url)
    assert report.exit_code == 1 and levels(report)["reads"] == "fail", text(report)
    assert "not a dormant database" in text(report)


def test_replication_findings() -> None:
    base = PgFacts(server_version="18", host="db", schema="s", schema_version=SCHEMA_VERSION)

    def replication(facts: PgFacts) -> tuple[str, str]:
        (found,) = [f for f in judge_postgres(facts, "postgresql://db/x", 300) if f.check == "replication"]
        return found.level, found.summary

    assert replication(base)[0] == "info"
    base.sync_standby_names = "b"
    level, summary = replication(base)
    assert level == "fail" and "every commit waits" in summary
    base.standbys = [("b", "10.0.0.2", "streaming", "sync", 0.01, 1024.0)]
    assert replication(base) == ("ok", "1 standby(s), synchronous")
    base.sync_standby_names = ""
    base.standbys = [("b", "10.0.0.2", "streaming", "async", 45.0, 1024.0)]
    level, summary = replication(base)
    assert level == "warn" and "far behind" in summary
    standby = PgFacts(in_recovery=True, replay_age_s=1.5, schema_version=SCHEMA_VERSION)
    assert replication(standby) == ("info", "connected to a standby: last transaction replayed 1.5 s ago")
