"""``dormant serve`` and friends failing cleanly, in subprocesses: a busy port, an unreachable
store, bad server flags; where it serves said only once it does; a missing store created
(and said) by every command alike."""

from __future__ import annotations

import asyncio
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from dormant.cli.base import announce_if_new, err
from dormant.store import open_store

from .runner import Cli, assert_usage_error, clean_env


def assert_one_error_line(result: subprocess.CompletedProcess[str], code: int, *fragments: str) -> None:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "dormant serving" not in result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_a_busy_port_is_one_line_and_exit_2(cli: Cli, tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = cli("serve", "--port", str(port), timeout=30)
    assert_one_error_line(result, 2, f"cannot listen on 127.0.0.1:{port}", "address already in use")
    assert not (tmp_path / "t.db").exists()  # the port is bound before the store is touched


def test_an_unreachable_store_is_one_line_and_exit_1(cli: Cli) -> None:
    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        dead = closed.getsockname()[1]
    url = f"postgresql://dormant:hunter2secret@127.0.0.1:{dead}/nowhere"
    result = cli("serve", "--port", "0", "--store", url, store=False, timeout=60)
    assert_one_error_line(result, 1, "PostgreSQL")
    assert "hunter2secret" not in result.stderr + result.stdout


def test_serve_says_where_it_serves_once_it_accepts(cli: Cli) -> None:
    proc = subprocess.Popen(
        cli.argv("serve", "--port", "0"), cwd=cli.cwd, env=clean_env(), stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 30
        line = ""
        while "dormant serving" not in line:
            line = proc.stderr.readline()
            assert line or proc.poll() is None, "serve ended before saying where it serves"
            assert time.monotonic() < deadline
        match = re.search(r"http://127\.0\.0\.1:(\d+) ", line)
        assert match is not None, line
        port = int(match.group(1))
        assert port != 0  # --port 0: the port it got
        # no retry: once said, it answers
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (("--header-timeout", "0"), "http_header_timeout_s"),
        (("--body-timeout", "-1"), "http_body_timeout_s"),
        (("--max-header-bytes", "10"), "http_max_header_bytes"),
        (("--max-headers", "100000"), "http_max_headers"),
        (("--cors-origin", "https://ok.example", "--cors-origin", "app.example.com"), "bad CORS origin"),
        (("--stream-token-secret", "short"), "at least 32 characters"),
    ],
)
def test_bad_server_flags_are_usage_errors(cli: Cli, flags: tuple[str, ...], fragment: str) -> None:
    assert_usage_error(cli("serve", "--port", "0", *flags, timeout=30), fragment)


def test_server_settings_come_from_the_environment_too(cli: Cli) -> None:
    result = cli("serve", "--port", "0", env={"DORMANT_HTTP_HEADER_TIMEOUT_S": "0"}, timeout=30)
    assert_usage_error(result, "http_header_timeout_s")
    result = cli("serve", "--port", "0", env={"DORMANT_CORS_ORIGIN": "https://a.example nope"}, timeout=30)
    assert_usage_error(result, "'nope'")
    shown = cli("serve", "--help", store=False).stdout
    for text in (
        "DORMANT_HTTP_HEADER_TIMEOUT_S",
        "DORMANT_HTTP_BODY_TIMEOUT_S",
        "DORMANT_HTTP_MAX_HEADER_BYTES",
        "DORMANT_HTTP_MAX_HEADERS",
        "DORMANT_CORS_ORIGIN",
        "DORMANT_DOCS",
        "DORMANT_STREAM_TOKEN_SECRET",
        "DORMANT_STREAM_TOKEN_TTL_S",
    ):
        assert text in shown, text


@pytest.mark.parametrize(
    "command",
    [
        ("send", "t", "hello"),
        ("status",),
        ("threads",),
        ("tenants", "list"),
        ("run", "--until-idle"),
        ("memory", "search", "anything", "--identity", "phone=1"),
    ],
)
def test_every_command_creates_a_missing_store_and_says_so(
    cli: Cli, tmp_path: Path, command: tuple[str, ...]
) -> None:
    result = cli(*command)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "t.db").exists()
    assert not result.stderr.strip() or command[0] == "run"  # a pipe: no note (a terminal gets one)
    again = cli(*command)
    assert again.returncode == 0, again.stderr


def test_a_new_store_is_announced_at_a_terminal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(err, "_force_terminal", True)  # as when stderr is a terminal
    with err.capture() as captured:
        asyncio.run(announce_if_new(open_store(f"sqlite:///{tmp_path}/new.db")))
    assert f"no store at sqlite:///{tmp_path}/new.db yet: creating it" in captured.get()
    with err.capture() as captured:
        asyncio.run(announce_if_new(open_store("memory://")))  # nothing to create on disk
    assert captured.get() == ""


def test_serve_creates_a_missing_store_too(cli: Cli, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        cli.argv("serve", "--port", "0"), cwd=cli.cwd, env=clean_env(), stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        assert "dormant serving" in proc.stderr.readline()
        assert (tmp_path / "t.db").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_doctor_never_creates_a_store(cli: Cli, tmp_path: Path) -> None:
    missing = cli("doctor", "--store", f"sqlite:///{tmp_path}/nope.db", store=False)
    assert missing.returncode == 2 and not (tmp_path / "nope.db").exists()  # doctor never creates
