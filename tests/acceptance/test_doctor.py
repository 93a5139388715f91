"""`dormant doctor`, failed-thread visibility and `dormant retry`, end to end in subprocesses.

Doctor exits 0 on a healthy store, 3 when something needs attention (expired leases,
failed threads), 1 when the store is damaged or a correctness rule is broken; the
runtime refuses to run on a damaged file and says what to do.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from dormant.records import CommitPlan, Message, NewCall, NewInput, ToolCall, ViewLimits
from dormant.store.sqlite import SCHEMA_VERSION, SQLiteStore
from tests.openai_server import Reply, ScriptServer, text_reply

from .runner import Cli


def db_of(cli: Cli) -> Path:
    return Path(cli.store.removeprefix("sqlite:///"))


def doctor(cli: Cli, *args: str) -> tuple[int, str, dict[str, object]]:
    """Run doctor twice (text and --json): exit code, text output, JSON report."""
    text = cli("doctor", *args)
    data = cli("doctor", "--json", *args)
    assert text.returncode == data.returncode, (text.stdout, data.stdout)
    assert "Traceback" not in text.stderr + data.stderr
    return text.returncode, text.stdout, json.loads(data.stdout)


def levels(report: dict[str, object]) -> dict[str, str]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return {f["check"]: f["level"] for f in findings}


def test_doctor_on_a_healthy_store(cli: Cli) -> None:
    cli.ok("send", "t1", "hello")
    cli.ok("run", "--until-idle")
    code, out, report = doctor(cli)
    assert code == 0, out
    assert (
        "integrity_check: ok" in out
        and f"schema version {SCHEMA_VERSION}" in out
        and "verdict: healthy" in out
    )
    assert report["status"] == "ok" and report["exit_code"] == 0
    assert set(levels(report)) >= {"integrity", "schema", "size", "leases", "backlog", "outbox", "threads"}
    quick = cli("doctor", "--quick")
    assert quick.returncode == 0 and "quick_check: ok" in quick.stdout


async def test_doctor_warns_about_expired_leases_and_failed_threads(cli: Cli) -> None:
    store = SQLiteStore(cli.store)
    await store.open()
    try:
        await store.admit(
            [
                NewInput(thread_id=t, kind="user", dedup_key="k", content="hi", agent="assistant")
                for t in ("dead-worker", "broken")
            ]
        )
        claims = {c.thread_id: c for c in await store.claim_threads("w-gone", 10, lease_s=-1.0)}
        await store.release(claims["broken"], error="ModelError: HTTP 500: upstream exploded", fail=True)
    finally:
        await store.close()
    code, out, report = doctor(cli)
    assert code == 3, out
    assert levels(report)["leases"] == "warn" and levels(report)["failed threads"] == "warn"
    assert "dead-worker (held by w-gone)" in out
    assert "broken after 1 failure(s): ModelError: HTTP 500: upstream exploded" in out
    assert "dormant retry THREAD" in out and "verdict: needs attention" in out


async def test_doctor_fails_when_a_call_is_never_answered(cli: Cli) -> None:
    store = SQLiteStore(cli.store)
    await store.open()
    try:
        await store.admit(
            [NewInput(thread_id="t1", kind="user", dedup_key="k", content="hi", agent="assistant")]
        )
        (claim,) = await store.claim_threads("w", 1, 30.0)
        load = await store.load_slice(claim, ViewLimits())
        call = ToolCall(id="c1", name="charge", arguments="{}")
        await store.commit_slice(
            CommitPlan(
                thread_id="t1",
                token=claim.token,
                consumed=(load.inputs[0].id,),
                messages=(
                    Message(seq=1, role="user", content="hi", input_id=load.inputs[0].id),
                    Message(seq=2, role="assistant", content="", tool_calls=(call,)),
                ),
                calls=(NewCall(call_id="c1", tool="charge", arguments="{}"),),
                awaiting=1,
            )
        )
    finally:
        await store.close()
    assert doctor(cli)[0] == 0, "an open call being worked on is fine"
    # break rule 5 behind the store's back: the call is given up without its answer
    conn = apsw.Connection(str(db_of(cli)))
    conn.execute("UPDATE outbox SET status = 'unknown'")
    conn.close()
    code, out, report = doctor(cli)
    assert code == 1, out
    assert levels(report)["outbox"] == "fail" and levels(report)["waiting threads"] == "fail"
    assert "t1 call c1 (unknown)" in out and "never reached the thread" in out
    assert "verdict: DAMAGED or broken" in out


def corrupt_page(db: Path, table: str) -> None:
    """Overwrite the root page of ``table`` with garbage."""
    conn = apsw.Connection(str(db))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    row = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    size_row = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    assert row is not None and size_row is not None
    page, size = int(row[0]), int(size_row[0])
    with open(db, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)


def test_a_damaged_file_is_refused_and_doctor_says_so(cli: Cli) -> None:
    cli.ok("send", "t1", "hello")
    cli.ok("run", "--until-idle")
    cli.ok("send", "t1", "again")
    corrupt_page(db_of(cli), "message_rows_thread_seq")  # found only when a slice reads the history
    ran = cli("run", "--until-idle")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in ran.stderr
    assert "damaged" in ran.stderr and "dormant stopped" in ran.stderr
    assert f"dormant doctor --store {cli.store}" in ran.stderr and "backup" in ran.stderr
    code, out, report = doctor(cli)
    assert code == 1 and levels(report)["integrity"] == "fail", out
    assert "integrity_check found damage" in out and ".recover" in out

    with open(db_of(cli), "r+b") as f:  # now the header: nothing can even open it
        f.write(b"\x00" * 100)
    refused = cli("run", "--until-idle")
    assert refused.returncode == 1
    assert "the database file is damaged" in refused.stderr and "dormant doctor --store" in refused.stderr
    code, out, report = doctor(cli)
    assert code == 1 and levels(report) == {"open": "fail"}, out


def test_doctor_usage_errors(cli: Cli, tmp_path: Path) -> None:
    missing = cli("doctor", "--store", f"sqlite:///{tmp_path}/nope.db", store=False)
    assert missing.returncode == 2 and "no database" in missing.stderr
    memory = cli("doctor", "--store", "memory://", store=False)
    assert memory.returncode == 2 and "nothing for doctor to examine" in memory.stderr
    assert not (tmp_path / "nope.db").exists(), "doctor never creates a database"


@pytest.fixture
def model_server() -> Iterator[ScriptServer]:
    srv = ScriptServer()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def test_a_failed_thread_is_listed_with_its_reason_and_retry_resumes_it(
    cli: Cli, tmp_path: Path, model_server: ScriptServer
) -> None:
    (tmp_path / "remote_app.py").write_text(
        "import os\n"
        "from dormant import Agent\n"
        "from dormant.models.openai import OpenAIChatModel\n"
        "def agents():\n"
        "    model = OpenAIChatModel(model='m', base_url=os.environ['TEST_BASE_URL'], max_retries=0)\n"
        "    return [Agent(name='assistant', model=model)]\n"
    )
    env = {
        "TEST_BASE_URL": model_server.base_url,
        "DORMANT_APP": "remote_app:agents",
        "DORMANT_MODEL_RETRIES": "1",
        "DORMANT_RETRY_BASE_S": "0.01",
        "DORMANT_RETRY_MAX_S": "0.05",
    }
    # a reply the server botched (an outage, 5xx, would make the thread wait instead)
    error = Reply(chunks=[b'data: {"error": {"message": "upstream exploded"}}\n\n'])
    model_server.script(error, error)  # the first attempt and its one retry
    cli.ok("send", "t1", "hello", env=env)
    ran = cli("run", "--until-idle", env=env)
    assert ran.returncode == 0, ran.stderr
    assert len(model_server.received) == 2
    cli.ok("send", "other", "not run yet", env=env)

    listed = cli.ok("threads", "--failed", env=env)
    assert "t1" in listed and "other" not in listed
    assert "error in stream: upstream exploded" in listed and "dormant retry THREAD" in listed
    assert "error in stream: upstream exploded" in cli.ok("threads", env=env)  # the error column
    shown = cli.ok("show", "t1", env=env)
    assert "failed" in shown and "last error: ModelError" in shown
    assert json.loads(cli.ok("status", "--json", env=env))["threads_by_status"] == {"active": 1, "failed": 1}

    model_server.script(text_reply("better now"), text_reply("better now"))  # t1 and "other"
    assert "active again" in cli.ok("retry", "t1", env=env)
    assert cli("run", "--until-idle", env=env).returncode == 0
    assert "better now" in cli.ok("show", "t1", env=env)
    assert "(no failed threads)" in cli.ok("threads", "--failed", env=env)
