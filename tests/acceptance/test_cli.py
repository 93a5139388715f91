"""The CLI end to end: each command in a subprocess on a fresh SQLite file."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import typer.main

from dormant import Agent, Runtime
from dormant.cli.main import app
from dormant.models import echo_model

from .runner import Cli, assert_usage_error, clean_env


def next_cursor(output: str) -> str | None:
    """The cursor a paged command printed, if any."""
    match = re.search(r"^next cursor: (\S+)", output, re.MULTILINE)
    return match.group(1) if match else None


def test_help_shows_env_vars(cli: Cli) -> None:
    top = cli("--help", store=False).stdout
    for command in ("init", "run", "send", "chat", "threads", "show", "status", "retry", "demo", "bench"):
        assert command in top
    send = cli("send", "--help", store=False)
    assert send.returncode == 0
    for var in (
        "DORMANT_STORE",
        "DORMANT_KEY",
        "DORMANT_AGENT",
        "DORMANT_PRIORITY",
        "DORMANT_APP",
        "DORMANT_MODEL",
    ):
        assert var in send.stdout
    assert "DORMANT_DEMO_AGENTS" in cli("demo", "--help", store=False).stdout


def test_every_option_has_an_env_var() -> None:
    group = typer.main.get_command(app)
    commands = getattr(group, "commands", {})
    assert commands
    for name, command in commands.items():
        if name == "bench":  # mounted from dormant.bench, checked there
            continue
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                envvar = getattr(param, "envvar", None)
                assert isinstance(envvar, str) and envvar.startswith("DORMANT_"), (name, param.name)


def test_console_script_runs(cli: Cli) -> None:
    script = Path(sys.executable).parent / "dormant"
    if not script.exists():  # the editable install puts it next to the interpreter
        return
    result = subprocess.run(
        [str(script), "init", "--store", cli.store],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "schema version" in result.stdout


def test_init_creates_the_store(cli: Cli, tmp_path: Path) -> None:
    out = cli.ok("init")
    assert cli.store in out
    assert re.search(r"schema version \d+", out)
    assert (tmp_path / "t.db").exists()
    assert "schema version" in cli.ok("init")  # idempotent


def test_send_run_show(cli: Cli) -> None:
    sent = cli.ok("send", "t1", "hello there")
    assert re.search(r"admitted input \d+ to thread t1", sent)
    assert "duplicate" not in sent
    ran = cli.ok("run", "--until-idle")
    assert "1 completions" in ran
    shown = cli.ok("show", "t1")
    assert "hello there" in shown
    assert "echo: hello there" in shown
    assert next_cursor(shown) is None


def test_send_same_key_is_admitted_once(cli: Cli) -> None:
    first = cli.ok("send", "t1", "hi", "--key", "k-1")
    second = cli.ok("send", "t1", "hi", "--key", "k-1")
    assert "duplicate" not in first
    assert "duplicate" in second
    assert re.findall(r"input (\d+)", first) == re.findall(r"input (\d+)", second)
    backlog = json.loads(cli.ok("status", "--json"))["backlog_by_priority"]
    assert sum(backlog.values()) == 1
    cli.ok("run", "--until-idle")
    shown = cli.ok("show", "t1")
    assert shown.count("echo: hi") == 1
    assert "#3" not in shown


async def test_threads_paging_with_cursor(cli: Cli) -> None:
    async with Runtime(cli.store, [Agent(name="assistant", model=echo_model())]) as rt:
        for i in range(5):
            await rt.send(f"p-{i}", "hi")
    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        args = ["threads", "--limit", "2"] + (["--cursor", cursor] if cursor else [])
        out = cli.ok(*args)
        page = re.findall(r"^\s*(p-\d)\b", out, re.MULTILINE)
        assert 1 <= len(page) <= 2, out
        seen += page
        pages += 1
        cursor = next_cursor(out)
        if cursor is None:
            break
    assert seen == [f"p-{i}" for i in range(5)]
    assert pages == 3


def test_status_json_counts(cli: Cli) -> None:
    cli.ok("send", "a", "x")
    cli.ok("send", "b", "y", "--priority", "0")
    before = json.loads(cli.ok("status", "--json"))
    assert before["threads_by_status"] == {"active": 2}
    assert before["backlog_by_priority"] == {"P0": 1, "P1": 1}
    assert before["threads_ready"] == 2
    assert before["messages"] == 0
    cli.ok("run", "--until-idle")
    after = json.loads(cli.ok("status", "--json"))
    assert after["store"] == cli.store
    assert after["messages"] == 4
    assert after["threads_leased"] == 0
    assert sum(after["backlog_by_priority"].values()) == 0
    assert after["dead_letters"] == 0
    assert after["schema_version"] >= 1
    assert after["db_bytes"] > 0
    human = cli.ok("status")
    assert "messages" in human and "schema version" in human


def test_chat_with_piped_stdin(cli: Cli) -> None:
    out = cli.ok("chat", "c1", input="first line\n\nsecond line\n")
    assert out.count("assistant: ") == 2
    assert "echo: first line" in out
    assert "echo: second line" in out
    assert out.index("echo: first line") < out.index("echo: second line")


def test_chat_quit_stops_reading(cli: Cli) -> None:
    out = cli.ok("chat", "c2", input="a\n/quit\nb\n")
    assert "echo: a" in out and "echo: b" not in out


def test_bad_store_url_is_a_usage_error(cli: Cli) -> None:
    assert_usage_error(cli("status", "--store", "nope://x", store=False), "nope://x")
    assert_usage_error(cli("send", "t", "x", "--store", "nope://x", store=False), "nope://x")


def test_a_missing_database_is_created_and_said_by_read_and_write_commands(cli: Cli) -> None:
    listing = cli("threads")
    assert listing.returncode == 0 and "(no threads)" in listing.stdout
    assert (cli.cwd / "t.db").exists()


def test_env_var_store_is_honoured(cli: Cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/from-env.db"
    env = {"DORMANT_STORE": url}
    assert url in cli("init", env=env, store=False).stdout
    assert (tmp_path / "from-env.db").exists()
    assert cli("send", "e", "via env", env=env, store=False).returncode == 0
    assert cli("run", "--until-idle", env=env, store=False).returncode == 0
    assert "echo: via env" in cli("show", "e", env=env, store=False).stdout
    assert not (tmp_path / "t.db").exists()


def test_invalid_setting_from_env_is_a_usage_error(cli: Cli) -> None:
    cli.ok("init")
    result = cli("run", "--until-idle", env={"DORMANT_LEASE_S": "-1"})
    assert_usage_error(result, "lease_s")


def test_retry_unknown_thread(cli: Cli) -> None:
    cli.ok("init")
    assert_usage_error(cli("retry", "nobody"), "nobody")
    assert_usage_error(cli("show", "nobody"), "nobody")


def test_a_thread_waits_for_a_worker_that_hosts_its_agent(cli: Cli, tmp_path: Path) -> None:
    # a `run` that does not host a thread's agent leaves it alone (it neither
    # fails it nor waits for it to become idle); status shows it waiting, by agent
    (tmp_path / "agents_app.py").write_text(
        "from dormant import Agent\n"
        "from dormant.models import echo_model\n"
        "def agents():\n"
        "    return [Agent(name='other', model=echo_model())]\n"
    )
    cli.ok("send", "f", "hi", "--app", "agents_app:agents")
    cli.ok("run", "--until-idle")
    status = json.loads(cli.ok("status", "--json"))
    assert status["threads_by_status"] == {"active": 1}
    assert status["ready_by_agent"] == {"other": 1}
    cli.ok("run", "--until-idle", "--app", "agents_app:agents")
    assert "echo: hi" in cli.ok("show", "f")


def test_retry_all_failed(cli: Cli, tmp_path: Path) -> None:
    # a model that refuses every request for good: each thread fails on its first slice
    (tmp_path / "refusing_app.py").write_text(
        "from dormant import Agent\n"
        "from dormant.errors import ModelError\n"
        "from dormant.models import ScriptedModel\n"
        "def refuse(request):\n"
        "    raise ModelError('refused on its merits', retryable=False)\n"
        "def agents():\n"
        "    return [Agent(name='other', model=ScriptedModel(refuse))]\n"
    )
    for thread in ("f1", "f2", "f3"):
        cli.ok("send", thread, "hi", "--app", "refusing_app:agents")
    cli.ok("run", "--until-idle", "--app", "refusing_app:agents")
    assert json.loads(cli.ok("status", "--json"))["threads_by_status"] == {"failed": 3}
    assert "0 failed thread(s) retried" in cli.ok("retry", "--all-failed", "--since", "2999-01-01")
    assert_usage_error(cli("retry", "--all-failed", "--since", "yesterday"), "--since")
    assert_usage_error(cli("retry"), "--all-failed")
    assert_usage_error(cli("retry", "f1", "--all-failed"), "--all-failed")
    out = cli.ok("retry", "--all-failed", "--since", "1h")
    assert "3 failed thread(s) retried" in out and "thread f2 is active again" in out
    assert json.loads(cli.ok("status", "--json"))["threads_by_status"] == {"active": 3}


def test_chat_budget_flags_and_builtins(cli: Cli) -> None:
    assert_usage_error(
        cli("chat", "c", "--max-output", "500", "--context-window", "400", input="x\n"), "max_output"
    )
    out = cli.ok("chat", "c", "--context-window", "8000", "--max-output", "500", input="hello\n")
    assert "echo: hello" in out
    helped = cli("chat", "--help", store=False).stdout
    assert "--context-window" in helped and "--no-builtins" in helped


def test_bad_app_is_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "not_agents.py").write_text("THING = 3\n")
    assert_usage_error(cli("send", "t", "x", "--app", "not_agents:THING"), "not_agents:THING")
    assert_usage_error(cli("send", "t", "x", "--app", "no_such_module:x"), "no_such_module")
    assert_usage_error(cli("send", "t", "x", "--app", "not_agents"), "module:attr")


def test_run_stops_gracefully_on_sigterm(cli: Cli) -> None:
    cli.ok("init")
    proc = subprocess.Popen(
        cli.argv("run"),
        cwd=cli.cwd,
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        assert "dormant running" in proc.stderr.readline()
        proc.send_signal(signal.SIGTERM)
        out, errors = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors
    assert "stopped after" in out
    assert "Traceback" not in errors


def test_delete_removes_a_thread_and_asks_first(cli: Cli) -> None:
    cli.ok("send", "keep", "hello")
    cli.ok("send", "gone", "hello")
    cli.ok("run", "--until-idle")
    refused = cli("delete", "gone", input="n\n")
    assert refused.returncode == 1
    assert "deleted 1 thread(s)" in cli.ok("delete", "gone", "--yes")
    assert "keep" in cli.ok("threads") and "gone" not in cli.ok("threads")
    assert_usage_error(cli("delete", "gone", "--yes"), "gone")
