"""Command-line plumbing shared by the commands that host agents (``run``, ``chat``, ``serve``):
their options, loading and closing the agents, and the command of one worker process."""

from __future__ import annotations

import inspect
import logging
import os
import sys
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from ..agent import Agent
from .apps import load_agents

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


def agents_for(
    app_spec: str | None, model: str, base_url: str, system: str | None, **options: Any
) -> list[Agent]:
    """The agents this invocation hosts (see :mod:`dormant.cli.apps`; ``options`` go to
    :func:`~dormant.cli.apps.load_agents`)."""
    return load_agents(app_spec, model=model, base_url=base_url, system=system, **options)


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
    env = dict(os.environ)
    env["DORMANT_STORE"] = store
    env["DORMANT_LOG_LEVEL"] = logging.getLevelName(logging.getLogger("dormant").level).lower()
    return argv, env


AgentOpt = Annotated[
    str | None,
    typer.Option("--agent", envvar="DORMANT_AGENT", help="Agent of a new thread (default: the first agent)."),
]
