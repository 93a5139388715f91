"""The model options on every command that hosts agents, the server's own figures read at
start, and a prompt stop on SIGTERM (the CLI in a subprocess, against a fake llama.cpp)."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from tests.fake_llama import FakeLlama, fake_llama

from .runner import Cli, clean_env

__all__ = ["fake_llama"]  # a fixture, used by name

KNOBS = {
    "--context-window": "DORMANT_CONTEXT_WINDOW",
    "--max-output": "DORMANT_MAX_OUTPUT",
    "--model-timeout": "DORMANT_MODEL_TIMEOUT_S",
    "--model-stream-timeout": "DORMANT_MODEL_STREAM_TIMEOUT_S",
    "--tokenizer": "DORMANT_TOKENIZER",
}


@pytest.mark.parametrize("command", ["run", "serve", "chat", "retry"])
def test_every_command_that_hosts_agents_has_every_knob_and_its_variable(cli: Cli, command: str) -> None:
    args = [command, "t", "--help"] if command == "chat" else [command, "--help"]
    helped = cli(*args, store=False, env={"COLUMNS": "400"}).stdout
    for flag, variable in KNOBS.items():
        assert flag in helped, f"{command} has no {flag}"
        assert variable in helped, f"{command} --help does not show {variable}"


def test_run_warns_when_the_declared_window_is_larger_than_the_server_s(
    cli: Cli, fake_llama: FakeLlama
) -> None:
    cli.ok("send", "t", "hello")
    result = cli("run", "--until-idle", "--model", "fake", "--base-url", fake_llama.base_url)
    assert result.returncode == 0, result.stderr
    assert "128,000" in result.stderr and "serves 2,048" in result.stderr
    assert "--context-window 2048" in result.stderr
    assert "no tool support" in result.stderr, "the built-in agent's tools cannot work with this template"
    assert fake_llama.bodies[-1]["max_tokens"] == 4096


def test_the_window_from_the_environment_reaches_the_built_in_agent(cli: Cli, fake_llama: FakeLlama) -> None:
    cli.ok("send", "t", "hello")
    env = {"DORMANT_CONTEXT_WINDOW": "2048", "DORMANT_MAX_OUTPUT": "300"}
    result = cli("run", "--until-idle", "--model", "fake", "--base-url", fake_llama.base_url, env=env)
    assert result.returncode == 0, result.stderr
    assert "declares a context window" not in result.stderr
    assert fake_llama.bodies[-1]["max_tokens"] == 300
    out = cli.ok("show", "t")
    assert "fake reply" in out


def test_status_shows_what_the_model_server_says(cli: Cli, fake_llama: FakeLlama) -> None:
    cli.ok("init")
    result = cli("status", "--model", "fake", "--base-url", fake_llama.base_url, env={"COLUMNS": "400"})
    assert result.returncode == 0, result.stderr
    assert "context 2,048" in result.stdout and "tools NO" in result.stdout
    assert "no tool support" in result.stdout
    data = json.loads(cli.ok("status", "--json", "--model", "fake", "--base-url", fake_llama.base_url))
    (server,) = data["model_servers"]
    assert (server["context"], server["supports_tools"], server["agent"]) == (2048, False, "assistant")
    assert len(server["warnings"]) == 2
    plain = json.loads(cli.ok("status", "--json"))
    assert plain["model_servers"] == [], "the scripted model has no server to ask"


def test_sigterm_cancels_a_running_slice_promptly_and_keeps_its_input(
    cli: Cli, fake_llama: FakeLlama
) -> None:
    fake_llama.hang_s = 60.0  # a model call that would take a minute
    cli.ok("send", "t", "hello")
    proc = subprocess.Popen(
        cli.argv("run", "--model", "fake", "--base-url", fake_llama.base_url, "--context-window", "2048"),
        cwd=cli.cwd,
        env=clean_env({"DORMANT_STOP_GRACE_S": "0.5"}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not fake_llama.bodies and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_llama.bodies, "the slice called the model"
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, errors = proc.communicate(timeout=30)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, errors
    assert took < 5.0, f"stopping took {took:.1f}s"
    assert "cancelled 1 running slice(s)" in errors
    status = json.loads(cli.ok("status", "--json"))
    assert status["backlog_by_priority"].get("P1") == 1, "the input is still pending"
    assert status["threads_by_status"] == {"active": 1} and status["threads_leased"] == 0
