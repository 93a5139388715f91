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


#: The MCP events ``dormant status --metrics`` shows, in this order.
MCP_EVENTS = ("calls", "failures", "timeouts", "restarts")


async def mcp_counts(
    url: str, token: str | None = None, timeout_s: float = 10.0
) -> dict[str, dict[str, int]]:
    """``dormant_mcp_total{server,event}`` scraped from a running process's ``/metrics``
    (``url``: its ``/metrics`` address, or its base address): server -> event -> count
    (every event of :data:`MCP_EVENTS` present, 0 when not counted yet).
    UsageError (with the URL, redacted) when it cannot be read."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    from ..errors import UsageError
    from ..urls import redact

    target = url.rstrip("/")
    if not target.endswith("/metrics"):
        target += "/metrics"
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            response = await client.get(target, headers=headers)
    except httpx.HTTPError as exc:
        raise UsageError(f"cannot read {redact(target)}: {type(exc).__name__}: {exc}") from None
    if response.status_code != 200:
        raise UsageError(f"{redact(target)} answered {response.status_code}: {response.text[:200]}")
    counts: dict[str, dict[str, int]] = {}
    try:
        for family in text_string_to_metric_families(response.text):
            for sample in family.samples:
                if sample.name == "dormant_mcp_total":
                    server, event = sample.labels.get("server", "?"), sample.labels.get("event", "?")
                    row = counts.setdefault(server, dict.fromkeys(MCP_EVENTS, 0))
                    row[event] = int(sample.value)
    except ValueError as exc:
        raise UsageError(f"{redact(target)} is not Prometheus text: {exc}") from None
    return dict(sorted(counts.items()))


def mcp_rows(counts: dict[str, dict[str, int]]) -> list[tuple[str, str | Text]]:
    """(label, value) rows of :func:`mcp_counts` for the status table."""
    if not counts:
        return [("MCP servers", "none counted by that process")]
    rows: list[tuple[str, str | Text]] = []
    for server, events in counts.items():
        line = ", ".join(f"{event} {events.get(event, 0):,}" for event in MCP_EVENTS)
        bad = events.get("failures", 0) or events.get("timeouts", 0)
        rows.append((f"MCP {server}", Text(line, style="yellow") if bad else line))
    return rows
