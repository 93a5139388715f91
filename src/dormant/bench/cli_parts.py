"""`dormant bench` commands of content parts: ``images`` (agents sending images) and
``upload`` (a large file through the HTTP API)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

console = Console()


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (the ``dormant bench`` group)."""
    app.command("images")(images)
    app.command("upload")(upload)


def _run(label: str, module: str, payload: dict[str, Any], result: Path, unit: str) -> dict[str, Any]:
    """``python -m module '<payload>'`` in a fresh process (its RSS its own), its
    ``progress N TOTAL`` lines as a bar; the JSON it wrote at ``result``."""
    cmd = [sys.executable, "-m", module, json.dumps(payload)]
    columns = (TextColumn(f"[bold]{label}[/]"), BarColumn(), MofNCompleteColumn(), TextColumn(unit))
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task(label, total=None)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            words = line.split()
            if words[:1] == ["progress"] and len(words) == 3:
                progress.update(task, completed=int(words[1]), total=int(words[2]))
        code = proc.wait()
    if code != 0:
        console.print(f"[red]error:[/] the {label} run failed (exit {code})")
        raise typer.Exit(1)
    data: dict[str, Any] = json.loads(result.read_text())
    return data


def images(
    agents: Annotated[int, typer.Option(min=2, envvar="DORMANT_BENCH_AGENTS")] = 10_000,
    wave: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_WAVE")] = 1000,
    probe: Annotated[
        int,
        typer.Option(
            min=1,
            envvar="DORMANT_BENCH_PROBE",
            help="threads given one more slice, one at a time, at the end",
        ),
    ] = 200,
    scale_turns: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DORMANT_BENCH_SCALE_TURNS",
            help="also run agent_scale at AGENTS x this many turns for its RSS slope (0: skip)",
        ),
    ] = 2,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/images"),
) -> None:
    """AGENTS threads each send 5 PNGs of ~200 KB, half of all images one shared picture.

    A vision-dialect adapter against a loopback server (another process) reads each
    slice's images from the blob store and sends them as data URIs. Runs the same
    threads text-only, then with images (and agent_scale for its slope), each in its
    own process on a fresh SQLite file, default configuration. Prints RSS against
    agents (slope in KiB/agent), DB + WAL against the unique bytes sent, and the extra
    latency and CPU of a slice with images in its view against text only. Writes
    ``OUT/summary.json``, ``OUT/text/`` and ``OUT/images/``.
    """
    from .images import compare, image_counts

    runs: dict[str, dict[str, Any]] = {}
    for mode in ("text", "images"):
        payload = {"mode": mode, "agents": agents, "wave": wave, "probe": probe, "out": str(out / mode)}
        runs[mode] = _run(mode, "dormant.bench.images", payload, out / mode / "summary.json", "agents")
    scale_slope = None
    if scale_turns:
        params = {"kind": "sqlite", "agents": agents, "turns": scale_turns, "wave": wave}
        params["out"] = str(out / "agent_scale")
        scale = _run(
            "agent_scale", "dormant.bench.scale", params, out / "agent_scale" / "summary.json", "turns"
        )
        scale_slope = float(scale["rss_slope_kib_per_agent"])
    summary = compare(runs["text"], runs["images"], scale_slope)
    summary["waves"] = {mode: runs[mode]["waves"] for mode in runs}
    summary["server"] = {mode: runs[mode]["server"] for mode in runs}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    total, copies, distinct = image_counts(agents)
    console.print(
        f"{agents:,} agents x 5 images = {total:,}: image number g = 5 x agent + k is the one shared "
        f"picture when g is even ({copies:,} copies), its own picture when g is odd ({distinct - 1:,}); "
        f"{distinct:,} distinct pictures",
        soft_wrap=True,
    )
    table = Table(title="images against text only")
    table.add_column("figure")
    table.add_column("text only", justify="right")
    table.add_column("images", justify="right")
    for mode_key in ("rss_start_bytes", "rss_end_bytes", "rss_peak_bytes", "rss_slope_kib_per_agent"):
        table.add_row(mode_key, *(f"{runs[m][mode_key]:,}" for m in ("text", "images")))
    for key in ("slice_p50_ms", "slice_p95_ms", "cpu_ms_per_slice", "probe_p50_ms", "probe_p95_ms"):
        table.add_row(key, *(f"{runs[m][key]:,}" for m in ("text", "images")))
    table.add_row("probe_cpu_ms (p50)", *(f"{runs[m]['probe_cpu_ms']:,}" for m in ("text", "images")))
    table.add_row("store_bytes (DB + WAL)", *(f"{runs[m]['store_bytes']:,}" for m in ("text", "images")))
    table.add_row("elapsed_s", *(f"{runs[m]['elapsed_s']:,}" for m in ("text", "images")))
    console.print(table)
    console.print(
        f"store {summary['store_bytes']:,} B / unique {summary['unique_bytes']:,} B = "
        f"{summary['store_over_unique']} (minus the text-only store: "
        f"{summary['store_minus_text_over_unique']}); target <= 1.1",
        soft_wrap=True,
    )
    slopes = summary["rss_slope_kib_per_agent"]
    console.print(
        f"RSS slope KiB/agent: images {slopes['images']}, text {slopes['text']}, agent_scale "
        f"{slopes['agent_scale']}",
        soft_wrap=True,
    )
    tp = runs["images"]["text_probe"]
    im = runs["images"]
    console.print(
        f"probe slices in turn, same store ({im['probes']} each): images p50 {im['probe_p50_ms']} ms / p95 "
        f"{im['probe_p95_ms']} ms / CPU {im['probe_cpu_ms']} ms; text only p50 {tp['p50_ms']} ms / p95 "
        f"{tp['p95_ms']} ms / CPU {tp['cpu_ms']} ms",
        soft_wrap=True,
    )
    console.print(
        f"extra per slice with images (paired probes): {json.dumps(summary['extra_per_probe_slice_paired'])}",
        soft_wrap=True,
    )
    console.print(
        f"extra per slice with images (the waves, separate runs): {json.dumps(summary['extra_per_slice'])}",
        soft_wrap=True,
    )
    console.print(f"wrote {out / 'summary.json'}")


def upload(
    mib: Annotated[
        int, typer.Option(min=1, max=1024, envvar="DORMANT_BENCH_MIB", help="file size (MiB)")
    ] = 50,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/upload"),
) -> None:
    """One file of MIB MiB uploaded as multipart/form-data to `dormant serve`: the
    server's peak RSS growth (a watcher process samples it every 5 ms; target < 10 MB).
    Writes ``OUT/summary.json``; exits 1 when the target is missed."""
    import asyncio
    from dataclasses import asdict

    from .upload import run

    figures = asyncio.run(run(out, mib))
    table = Table(title=f"upload of {mib} MiB")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in asdict(figures).items():
        table.add_row(
            name, f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
        )
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}")
    if not figures.passed:
        console.print("[red]FAIL[/]: not stored whole, or the server's RSS grew by 10 MB or more")
        raise typer.Exit(1)
    console.print(
        f"PASS: peak RSS +{figures.rss_growth_bytes / 1e6:.1f} MB for {figures.file_bytes / 1e6:.1f} MB"
    )
