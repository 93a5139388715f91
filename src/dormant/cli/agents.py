"""Command-line plumbing shared by the commands that host agents (``run``, ``chat``, ``serve``):
their options, loading and closing the agents, and the command of one worker process."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from ..agent import Agent
from .apps import load_agents

log = logging.getLogger("dormant.cli")

AppOpt = Annotated[
    str | None,
    typer.Option(
        "--app",
        envvar="DORMANT_APP",
        help="Agents to host: 'module:attr' naming a list of Agent or a callable returning one.",
    ),
]
ModelOpt = Annotated[
    str,
    typer.Option(
        "--model",
        envvar="DORMANT_MODEL",
        help="Model of the built-in 'assistant' agent: 'scripted' (echo) or a model name "
        "served by --base-url.",
    ),
]
BaseUrlOpt = Annotated[
    str,
    typer.Option(
        "--base-url",
        envvar="DORMANT_BASE_URL",
        help="OpenAI-compatible endpoint of --model (API key from DORMANT_API_KEY or OPENAI_API_KEY).",
    ),
]
SystemOpt = Annotated[
    str | None,
    typer.Option("--system", envvar="DORMANT_SYSTEM", help="System prompt of the built-in agent."),
]
ConcurrencyOpt = Annotated[
    int | None,
    typer.Option(
        "--concurrency", envvar="DORMANT_CONCURRENCY", min=1, help="Slices running at once (default: 64)."
    ),
]
WorkersOpt = Annotated[
    int,
    typer.Option(
        "--workers",
        envvar="DORMANT_WORKERS",
        min=1,
        max=256,
        help="Worker processes running the slices, supervised (one that dies is restarted); with "
        "`serve`, N > 1 leaves this process serving HTTP. More hosts: run `dormant run` on each, "
        "pointed at the same PostgreSQL database.",
    ),
]


ContextWindowOpt = Annotated[
    int | None,
    typer.Option(
        "--context-window",
        envvar="DORMANT_CONTEXT_WINDOW",
        min=2,
        help="Tokens the built-in agent's model accepts in one request, prompt and reply "
        "(default: 128,000; dormant warns at start when the server says it serves fewer).",
    ),
]
MaxOutputOpt = Annotated[
    int | None,
    typer.Option(
        "--max-output",
        envvar="DORMANT_MAX_OUTPUT",
        min=1,
        help="Output cap of the built-in agent's model, in tokens (default: 4,096, or half a "
        "smaller window).",
    ),
]
ModelTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--model-timeout",
        envvar="DORMANT_MODEL_TIMEOUT_S",
        min=0.001,
        help="Seconds a model call may take to its first streamed piece (default: 300; the server "
        "reads the whole prompt first).",
    ),
]
StreamTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--model-stream-timeout",
        envvar="DORMANT_MODEL_STREAM_TIMEOUT_S",
        min=0.001,
        help="Seconds a streaming reply may go without a piece (default: 60).",
    ),
]
TokenizerOpt = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        envvar="DORMANT_TOKENIZER",
        help="How the built-in agent counts tokens: 'auto' (o200k_base, with the model's own "
        "ratio learned from the server's usage), an encoding (o200k_base, cl100k_base), a path "
        "to the model's tokenizer.json, or 'server' (the server's POST /tokenize).",
    ),
]


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelKnobs:
    """The model options every command that hosts agents takes (``--context-window``, ...)."""

    context_window: int | None = None
    max_output: int | None = None
    model_timeout: float | None = None
    stream_timeout: float | None = None
    tokenizer: str | None = None

    def settings(self) -> dict[str, float | None]:
        """The :class:`~dormant.config.Settings` overrides these knobs make."""
        return {"model_timeout_s": self.model_timeout, "model_stream_timeout_s": self.stream_timeout}

    def argv(self) -> list[str]:
        """These knobs as options of a worker's command line."""
        args: list[str] = []
        for flag, value in (
            ("--context-window", self.context_window),
            ("--max-output", self.max_output),
            ("--model-timeout", self.model_timeout),
            ("--model-stream-timeout", self.stream_timeout),
            ("--tokenizer", self.tokenizer),
        ):
            if value is not None:
                args += [flag, str(value)]
        return args


def agents_for(
    app_spec: str | None,
    model: str,
    base_url: str,
    system: str | None,
    knobs: ModelKnobs | None = None,
    **options: Any,
) -> list[Agent]:
    """The agents this invocation hosts (see :mod:`dormant.cli.apps`; ``knobs`` configure
    the built-in agent's model, ``options`` go to :func:`~dormant.cli.apps.load_agents`)."""
    knobs = knobs or ModelKnobs()
    options.setdefault("context_window", knobs.context_window)
    options.setdefault("max_output_tokens", knobs.max_output)
    options.setdefault("tokenizer", knobs.tokenizer)
    return load_agents(app_spec, model=model, base_url=base_url, system=system, **options)


async def server_notices(agents: Sequence[Agent]) -> list[str]:
    """What the model servers of ``agents`` say is wrong with how they are configured: a
    declared window larger than the server's context, tools a chat template cannot show
    (:meth:`dormant.models.server.ServerInfo.warnings`). Each warning is logged once
    (``model_server_warning``). A server that does not answer says nothing."""
    notices: list[str] = []
    for agent in agents:
        describe = getattr(agent.model, "describe", None)
        if not callable(describe):
            continue
        info = await describe()
        window = getattr(agent.model, "context_window", 0)
        for notice in info.warnings(window=window, tools=len(agent.toolbox.schemas), agent=agent.name):
            log.warning("model_server_warning: %s", notice, extra={"agent": agent.name, "warning": notice})
            notices.append(notice)
    return notices


async def close_models(agents: Sequence[Agent]) -> None:
    """Close models that hold resources (HTTP clients)."""
    for agent in agents:
        aclose = getattr(agent.model, "aclose", None)
        if callable(aclose):
            result = aclose()
            if inspect.isawaitable(result):
                await result


def worker_command(
    store: str,
    *,
    until_idle: bool,
    concurrency: int | None,
    app_spec: str | None,
    model: str,
    base_url: str,
    system: str | None,
    knobs: ModelKnobs | None = None,
) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one single-process worker (``dormant run --workers 1``).

    The store URL goes by environment, never argv: ``ps`` shows argv to every user.
    """
    argv = [sys.executable, "-m", "dormant.cli", "run", "--workers", "1"]
    argv += ["--model", model, "--base-url", base_url]
    if until_idle:
        argv.append("--until-idle")
    if concurrency is not None:
        argv += ["--concurrency", str(concurrency)]
    if app_spec is not None:
        argv += ["--app", app_spec]
    if system is not None:
        argv += ["--system", system]
    if knobs is not None:
        argv += knobs.argv()
    env = dict(os.environ)
    env["DORMANT_STORE"] = store
    env["DORMANT_LOG_LEVEL"] = logging.getLevelName(logging.getLogger("dormant").level).lower()
    return argv, env


AgentOpt = Annotated[
    str | None,
    typer.Option("--agent", envvar="DORMANT_AGENT", help="Agent of a new thread (default: the first agent)."),
]
