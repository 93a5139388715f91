"""The model rows of ``dormant status``: the tokens the model servers counted,
the threads waiting on a model endpoint that is down, and what the model servers say
of themselves (context size, tool support) with the warnings that follow."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from ..agent import Agent
from ..records import StoreStatus
from .base import clip, when


def model_rows(status: StoreStatus) -> list[tuple[str, str | Text]]:
    """(label, value) rows: model tokens summed over the threads, and, when threads wait
    on a model endpoint, how many, until when and why (the commonest reasons)."""
    usage = status.usage
    rows: list[tuple[str, str | Text]] = [
        (
            "model tokens",
            f"prompt {usage.get('prompt', 0):,} (cached {usage.get('cached', 0):,}), "
            f"completion {usage.get('completion', 0):,}",
        )
    ]
    if status.threads_waiting:
        reasons = "; ".join(f"{n:,}x {clip(reason, 120)}" for reason, n in status.waiting_by_reason.items())
        line = f"{status.threads_waiting:,} until {when(status.waiting_until)}: {reasons}"
        rows.append(("waiting on model", Text(line, style="yellow")))
    return rows


async def server_rows(agents: Sequence[Agent]) -> list[dict[str, object]]:
    """What each agent's model server says (context size, tool support) and the warnings
    for it, as JSON-ready rows; agents whose model cannot say are left out."""
    rows: list[dict[str, object]] = []
    for agent in agents:
        describe = getattr(agent.model, "describe", None)
        if not callable(describe):
            continue
        info = await describe()
        window = getattr(agent.model, "context_window", 0)
        rows.append(
            {
                "agent": agent.name,
                "endpoint": info.endpoint,
                "context": info.context,
                "supports_tools": info.supports_tools,
                "declared_window": window,
                "warnings": info.warnings(window=window, tools=len(agent.toolbox.schemas), agent=agent.name),
            }
        )
    return rows


def server_table_rows(rows: Sequence[dict[str, object]]) -> list[tuple[str, str | Text]]:
    """(label, value) rows of :func:`server_rows` for the status table."""
    out: list[tuple[str, str | Text]] = []
    for row in rows:
        context = row["context"]
        tools = {True: "yes", False: "NO", None: "not said"}[row["supports_tools"]]  # type: ignore[index]
        said = f"context {context:,}" if isinstance(context, int) else "context not said"
        out.append((f"model server ({row['agent']})", f"{row['endpoint']}: {said}, tools {tools}"))
        for warning in row["warnings"]:  # type: ignore[attr-defined]
            out.append(("warning", Text(str(warning), style="yellow")))
    return out
