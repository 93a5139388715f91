"""``dormant bench matrix`` and ``dormant bench peers`` (registered by :mod:`dormant.bench.cli`)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from .extra import bench_extra_message

console = Console()


def _require_extra(command: str) -> None:
    message = bench_extra_message(command)
    if message is not None:
        console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        raise typer.Exit(2)


def _run_cell(
    module: str, payload: dict[str, Any], progress: Progress, task: Any, base: float, weight: float
) -> int:
    """Run one cell's process; move the bar by ``weight`` across its progress lines."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, json.dumps(payload)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        parts = line.split()
        if parts[:1] == ["progress"] and len(parts) == 3 and int(parts[2]) > 0:
            progress.update(task, completed=base + weight * int(parts[1]) / int(parts[2]))
    return proc.wait()


def matrix(
    quick: Annotated[
        bool, typer.Option("--quick", help="one axis at a time around 1,000 sessions (< 10 min)")
    ] = False,
    full: Annotated[
        bool, typer.Option("--full", help="the whole grid, 100,000-session cells too (hours)")
    ] = False,
    sessions: Annotated[
        list[int] | None,
        typer.Option(min=1, help="with --quick: the sessions axis (repeat), default 1,000 and 10,000"),
    ] = None,
    rounds: Annotated[int, typer.Option(min=1, max=100, help="measured rounds per cell")] = 3,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/matrix"),
) -> None:
    """The benchmark matrix: RSS, heap, cache, history reads and slice latency over
    sessions x active ratio x history shape x message mix; CSV, JSON, PNG and HTML."""
    from .matrix import Cell, cell_weight, full_grid, not_run, quick_grid, write_report

    if quick == full:
        raise typer.BadParameter("give one of --quick or --full", param_hint="--quick/--full")
    if full and sessions:
        raise typer.BadParameter("--sessions goes with --quick", param_hint="--sessions")
    _require_extra("bench matrix")
    axis = sorted(set(sessions)) if sessions else [1_000, 10_000]
    cells: list[Cell] = quick_grid(axis[0], axis) if quick else full_grid()
    weights = [cell_weight(c) for c in cells]
    rows: list[dict[str, Any]] = []
    started = time.time()
    with Progress(
        TextColumn("[bold]{task.description}[/]"),
        BarColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
    ) as progress:
        task = progress.add_task("matrix", total=sum(weights) or 1)
        done = 0.0
        for n, (cell, weight) in enumerate(zip(cells, weights, strict=True), 1):
            progress.update(task, description=f"{n}/{len(cells)} {cell.name}")
            if not cell.runnable:
                rows.append(not_run(cell))
                continue
            payload = {
                "sessions": cell.sessions,
                "active_pct": cell.active_pct,
                "history": cell.history,
                "mix": cell.mix,
                "rounds": rounds,
                "out": str(out / "cells" / cell.name),
            }
            code = _run_cell("dormant.bench.matrix_cell", payload, progress, task, done, weight)
            done += weight
            if code != 0:
                rows.append({**not_run(cell), "status": f"failed (exit {code})"})
                continue
            rows.append(json.loads((out / "cells" / cell.name / "cell.json").read_text()))
    meta = {
        "preset": "quick" if quick else "full",
        "rounds": rounds,
        "elapsed_s": round(time.time() - started, 1),
    }
    paths = write_report(rows, out, meta)
    table = Table(title=f"bench matrix ({meta['preset']}, {meta['elapsed_s']} s)")
    table.add_column("cell", no_wrap=True)
    for col in ("status", "RSS MiB", "embedder", "KiB/session", "p50 ms", "p99 ms", "hit", "formula"):
        table.add_column(col, justify="right")
    for r in rows:
        ok = r.get("status") == "ok"
        name = Cell(r["sessions"], r["active_pct"], r["history"], r["mix"]).name
        table.add_row(
            name,
            "ok" if ok else str(r["status"]),
            f"{r['rss_end_bytes'] / 2**20:.1f}" if ok else "",
            f"{r['embedder_rss_bytes'] / 2**20:.1f}" if ok else "",
            str(r.get("rss_slope_kib_per_session", "")) if ok else "",
            str(r.get("slice_p50_ms", "")),
            str(r.get("slice_p99_ms", "")),
            str(r.get("view_cache_hit_ratio", "")),
            f"{r.get('formula_ratio', '')}{'' if r.get('formula_holds') else ' off'}" if ok else "",
        )
    console.print(table)
    for path in paths:
        console.print(f"wrote {path}")
    if any(str(r.get("status", "")).startswith("failed") for r in rows):
        raise typer.Exit(1)


#: the figures of the peers table: (key, label, higher is better)
PEER_FIGURES = (
    ("turns_per_s", "turns/s", True),
    ("rss_end_bytes", "RSS at the end (MiB)", False),
    ("rss_slope_kib_per_agent", "RSS slope (KiB/agent)", False),
    ("disk_bytes_per_agent", "disk per agent (bytes)", False),
    ("turn_last_over_first", "turn N / turn 1 latency", False),
)


def peers(
    agents: Annotated[int, typer.Option(min=1, help="agents (agent_scale)")] = 1_000,
    turns: Annotated[int, typer.Option(min=1, max=1_000, help="turns per agent")] = 20,
    wave: Annotated[int, typer.Option(min=1, help="agents per wave (RSS is sampled after each)")] = 100,
    check: Annotated[int, typer.Option(min=1, help="threads read back and compared, per system")] = 1_000,
    system: Annotated[list[str] | None, typer.Option(help="systems to run (repeat; default all six)")] = None,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/peers"),
) -> None:
    """agent_scale on LangGraph (SqliteSaver, PostgresSaver, InMemorySaver) and on dormant
    (SQLite, PostgreSQL, memory://), one after another; one table, ratios to the peer."""
    from .peers import OURS, PAIRS, PEERS, missing_peer_packages
    from .stats import ratio

    systems = system or [*PEERS, *OURS]
    unknown = [s for s in systems if s not in PEERS + OURS]
    if unknown:
        raise typer.BadParameter(
            f"unknown {unknown[0]!r}: one of {', '.join(PEERS + OURS)}", param_hint="--system"
        )
    missing = missing_peer_packages()
    if missing and any(s in PEERS for s in systems):
        console.print(
            f"[red]error:[/] {escape(', '.join(missing))} not installed: run pip install 'dormant\\[peers]'"
        )
        raise typer.Exit(2)
    results: dict[str, dict[str, Any]] = {}
    failed = []
    with Progress(
        TextColumn("[bold]{task.description}[/]"), BarColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("peers", total=len(systems))
        for n, name in enumerate(systems):
            progress.update(task, description=name, completed=n)
            payload = {"system": name, "agents": agents, "turns": turns, "wave": wave, "check": check}
            cmd = [
                sys.executable,
                "-m",
                "dormant.bench.peers",
                json.dumps({**payload, "out": str(out / name)}),
            ]
            code = subprocess.run(cmd, stdout=subprocess.DEVNULL, check=False).returncode
            path = out / name / "peer.json"
            if path.exists():
                results[name] = json.loads(path.read_text())
            if code != 0:
                failed.append(name)
        progress.update(task, completed=len(systems))
    rows = []
    for name, r in results.items():
        peer = results.get(PAIRS.get(name, ""))
        row: dict[str, Any] = dict(r)
        for key, _, higher in PEER_FIGURES:
            if peer is not None and r.get(key) is not None and peer.get(key) is not None:
                x = ratio(float(r[key]), float(peer[key]), higher_is_better=higher)
                row[f"{key}_x_peer"] = None if x is None else round(x, 2)
        rows.append(row)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = Table(title=f"agent_scale {agents} x {turns}: dormant against LangGraph (x peer: times better)")
    table.add_column("figure")
    for r in rows:
        table.add_column(str(r["system"]), justify="right")
    for key, label, _ in PEER_FIGURES:
        cells = []
        for r in rows:
            value = r.get(key)
            shown = f"{value / 2**20:.1f}" if key == "rss_end_bytes" and value is not None else str(value)
            x = r.get(f"{key}_x_peer")
            cells.append(shown + (f" ({x}x)" if x is not None else ""))
        table.add_row(label, *cells)
    table.add_row("work verified", *(f"{r['verified']} ({r['threads_checked']} threads)" for r in rows))
    console.print(table)
    console.print(f"wrote {out / 'peers.json'}")
    if failed:
        console.print(f"[red]error:[/] {', '.join(failed)} failed or did not do the work")
        raise typer.Exit(1)
