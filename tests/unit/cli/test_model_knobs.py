"""The model options reach the built-in agent, the settings and the workers' command line."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.cli.agents import ModelKnobs, agents_for, worker_command
from dormant.config import Settings
from dormant.errors import UsageError
from dormant.models.openai import OpenAIChatModel


def test_the_built_in_agent_gets_the_window_output_and_tokenizer() -> None:
    knobs = ModelKnobs(context_window=2048, max_output=300, tokenizer="cl100k_base")
    (agent,) = agents_for(None, "smol", "http://127.0.0.1:9/v1", None, knobs)
    model = agent.model
    assert isinstance(model, OpenAIChatModel)
    assert (model.context_window, model.max_output_tokens, model.encoding) == (2048, 300, "cl100k_base")
    assert not model.learns_tokens, "a named encoding is exact: nothing to learn"
    (auto,) = agents_for(None, "smol", "http://127.0.0.1:9/v1", None, ModelKnobs())
    assert isinstance(auto.model, OpenAIChatModel) and auto.model.learns_tokens
    assert auto.model.context_window == 128_000 and auto.model.max_output_tokens == 4096


def test_a_server_tokenizer_counts_at_the_base_url() -> None:
    (agent,) = agents_for(None, "smol", "http://127.0.0.1:9/v1", None, ModelKnobs(tokenizer="server"))
    assert agent.model.encoding == "server:http://127.0.0.1:9/v1"


def test_a_bad_tokenizer_or_window_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no tokenizer file"):
        agents_for(None, "smol", "http://h/v1", None, ModelKnobs(tokenizer=str(tmp_path / "nope.json")))
    with pytest.raises(UsageError, match="max_output_tokens"):
        agents_for(None, "smol", "http://h/v1", None, ModelKnobs(context_window=1000, max_output=1000))


def test_the_timeouts_are_settings() -> None:
    knobs = ModelKnobs(model_timeout=900.0, stream_timeout=30.0)
    settings = Settings.build(**{k: v for k, v in knobs.settings().items() if v is not None})
    assert (settings.model_timeout_s, settings.model_stream_timeout_s) == (900.0, 30.0)
    defaults = Settings.build()
    assert (defaults.model_timeout_s, defaults.model_stream_timeout_s, defaults.stop_grace_s) == (
        300.0,
        60.0,
        2.0,
    )


def test_workers_get_the_knobs_on_their_command_line() -> None:
    knobs = ModelKnobs(context_window=2048, max_output=256, model_timeout=600.0, tokenizer="server")
    argv, env = worker_command(
        "sqlite:///x.db",
        until_idle=False,
        concurrency=None,
        app_spec=None,
        model="smol",
        base_url="http://h/v1",
        system=None,
        knobs=knobs,
    )
    joined = " ".join(argv)
    assert "--context-window 2048" in joined and "--max-output 256" in joined
    assert "--model-timeout 600.0" in joined and "--tokenizer server" in joined
    assert "--model-stream-timeout" not in joined, "unset knobs are left to the worker's environment"
    assert env["DORMANT_STORE"] == "sqlite:///x.db"
