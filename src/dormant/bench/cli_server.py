"""`dormant bench` commands that drive a server or MCP: ``mcp``, ``mcp-recall``, ``serve``, ``ui``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (the ``dormant bench`` group)."""
    app.command("mcp")(mcp_calls)
    app.command("mcp-recall")(mcp_recall)
    app.command("serve")(serve_load)
    app.command("ui")(ui_pages)


def mcp_calls(
    calls: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_CALLS")] = 500,
    servers: Annotated[int, typer.Option(min=1, max=64, envvar="DORMANT_BENCH_MCP_SERVERS")] = 10,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/mcp"),
) -> None:
    """One MCP call through the outbox against one plain async tool: CALLS threads, one
    call each; then a worker with SERVERS stdio MCP servers (list time, RSS idle and under
    load). Writes ``OUT/summary.json``."""
    import asyncio

    from .mcp import run_mcp_bench

    summary = asyncio.run(run_mcp_bench(calls, servers, out))
    table = Table(title=f"MCP vs plain async tool ({calls} calls)")
    table.add_column("figure")
    for name in summary:
        table.add_column(name, justify="right")
    for key in next(iter(summary.values())):
        table.add_row(key, *(f"{run[key]:,.3f}" for run in summary.values()))
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}")


def mcp_recall(
    calls: Annotated[int, typer.Option(min=20, max=100_000, envvar="DORMANT_BENCH_CALLS")] = 300,
    memories: Annotated[int, typer.Option(min=1, max=10_000, envvar="DORMANT_BENCH_MEMORIES")] = 200,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/mcp-recall"),
) -> None:
    """One recall through /mcp against the same recall through REST, CALLS each, one at a
    time, on a live loopback server: p50/p99 and CPU per call. Writes ``OUT/summary.json``."""
    import asyncio

    from .mcp_recall import run_mcp_recall_bench

    figures = asyncio.run(run_mcp_recall_bench(calls, memories, out))
    table = Table(title=f"recall: REST vs MCP ({calls} calls each)")
    table.add_column("figure")
    for name in figures:
        table.add_column(name, justify="right")
    for key in figures["rest"]:
        table.add_row(key, *(f"{run[key]:,.3f}" for run in figures.values()))
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}")


def serve_load(
    clients: Annotated[
        int, typer.Option(min=1, max=5000, envvar="DORMANT_BENCH_CLIENTS", help="SSE streams held open")
    ] = 1000,
    posters: Annotated[
        int, typer.Option(min=1, max=1000, envvar="DORMANT_BENCH_POSTERS", help="closed-loop posting clients")
    ] = 32,
    seconds: Annotated[
        float, typer.Option(min=1, max=600, envvar="DORMANT_BENCH_SECONDS", help="posting time")
    ] = 20.0,
    store: Annotated[
        str, typer.Option(envvar="DORMANT_BENCH_STORE", help="sqlite (a temporary file) or memory")
    ] = "sqlite",
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/serve"),
) -> None:
    """Load on `dormant serve` over loopback: SSE clients + admissions at the highest steady rate.

    Prints admissions/s, admit latency, event delivery lag and the server's RSS; writes OUT/summary.json.
    """
    import asyncio
    from dataclasses import asdict

    from .serve import Params, run

    if store not in ("sqlite", "memory"):
        raise typer.BadParameter("--store must be sqlite or memory")
    params = Params(clients=clients, posters=posters, seconds=seconds, store=store)
    figures = asyncio.run(run(params, out))
    table = Table(title="serve")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in asdict(figures).items():
        table.add_row(name, str(value))
    console.print(table)


def ui_pages(
    threads: Annotated[int, typer.Option(min=1, max=200_000, help="threads in the store")] = 10_000,
    messages: Annotated[int, typer.Option(min=0, max=100_000, help="messages of the long thread")] = 2000,
    rounds: Annotated[int, typer.Option(min=1, max=1000, help="fetches of each page")] = 50,
    dashboards: Annotated[int, typer.Option(min=0, max=200, help="live dashboards at the end")] = 20,
    seconds: Annotated[float, typer.Option(min=1, max=600, help="seconds they stay live")] = 60.0,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/ui"),
) -> None:
    """The dashboard's pages over a store of many threads: p50/p99 per page, RSS before/after."""
    import asyncio

    from .ui import run

    figures = asyncio.run(run(threads, messages, rounds, out, dashboards=dashboards, live_s=seconds))
    table = Table(title="ui")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        table.add_row(name, str(value))
    console.print(table)
