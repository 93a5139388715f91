"""``dormant bench`` commands: ``scale``, ``plot``, ``chaos``, ``hosts``, ``context``, ``governor``,
``recall``, ``mcp``, ``images`` and ``upload``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .cli_matrix import matrix, peers
from .cli_parts import register as _register_parts
from .cli_server import register as _register_server
from .extra import bench_extra_message
from .hosts_cli import hosts
from .scale import DEFAULT_VIEW_CACHE_BYTES, load_summary

bench_app = typer.Typer(help="Benchmarks that print figures and write CSV/JSON/PNG.", no_args_is_help=True)
console = Console()
bench_app.command("matrix")(matrix)
bench_app.command("peers")(peers)
bench_app.command("hosts")(hosts)

STORES = ("sqlite", "memory", "postgres")
SHOWN = (
    "turns_per_s",
    "completions_per_s",
    "rss_start_bytes",
    "rss_end_bytes",
    "rss_peak_bytes",
    "rss_peak_sampled_bytes",
    "rss_slope_kib_per_agent",
    "db_bytes_per_agent",
    "raw_bytes_per_agent",
    "counts_tokens",
    "tokenizer_loaded",
    "slice_p50_ms",
    "slice_p95_ms",
    "slice_p99_ms",
    "turn_latency_first_ms",
    "turn_latency_last_ms",
    "flatness",
    "flatness_rounds",
    "flatness_cpu",
)


def _require_extra(command: str) -> None:
    """Exit 2 with what to install when the ``bench`` extra is missing (before any work)."""
    message = bench_extra_message(command)
    if message is not None:
        console.print(f"[red]error:[/] {escape(message)}", soft_wrap=True)
        raise typer.Exit(2)


def _run_one(kind: str, params: dict[str, object], out: Path) -> dict[str, object]:
    """Run one store in a fresh process (so stores never share a heap) with a progress bar."""
    payload = json.dumps({"kind": kind, "out": str(out), **params})
    # with worker processes the benchmark process only drives the workload
    module = "dormant.bench.scale_workers" if params.get("workers") else "dormant.bench.scale"
    return _run_process(kind, module, payload, out)


def _run_process(label: str, module: str, payload: str, out: Path) -> dict[str, object]:
    """Run ``module`` with ``payload`` in a fresh process, showing its ``progress N TOTAL`` lines."""
    kind = label
    cmd = [sys.executable, "-m", module, payload]
    with Progress(
        TextColumn(f"[bold]{kind}[/]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("turns"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        task = progress.add_task(kind, total=None)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            parts = line.split()
            if parts[:1] == ["progress"] and len(parts) == 3:
                progress.update(task, completed=int(parts[1]), total=int(parts[2]))
        code = proc.wait()
    if code != 0:
        console.print(f"[red]error:[/] the {kind} run failed (exit {code})")
        raise typer.Exit(1)
    return load_summary(out / "summary.json")


def _table(summaries: list[dict[str, object]]) -> Table:
    table = Table(title="agent_scale")
    table.add_column("figure")
    for s in summaries:
        table.add_column(str(s["store"]), justify="right")
    for key in SHOWN:
        label = key
        if key.startswith("flatness"):
            turns = next((s.get("flatness_turns") for s in summaries if s.get("flatness_turns")), None)
            what = {"flatness": "slice p50", "flatness_rounds": "round"}.get(key, "CPU per turn")
            if isinstance(turns, list):
                label = f"{key} ({what}, turn {turns[1]} / turn {turns[0]})"
        table.add_row(label, *(f"{s.get(key, '')}" for s in summaries))
    return table


@bench_app.command("scale")
def scale(
    store: Annotated[
        list[str] | None,
        typer.Option(
            help="store(s) to run: sqlite, memory, postgres (repeat to compare)", envvar="DORMANT_BENCH_STORE"
        ),
    ] = None,
    agents: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_AGENTS")] = 10_000,
    turns: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_TURNS")] = 20,
    wave: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_WAVE")] = 500,
    concurrency: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_CONCURRENCY")] = 256,
    view_messages: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_VIEW_MESSAGES")] = 64,
    view_bytes: Annotated[int, typer.Option(min=1024, envvar="DORMANT_BENCH_VIEW_BYTES")] = 256 * 1024,
    view_tokens: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DORMANT_BENCH_VIEW_TOKENS",
            help="cap the token budget of a view (0: what the model's window leaves); under 4 x "
            "--view-bytes, messages are counted",
        ),
    ] = 0,
    view_cache_bytes: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DORMANT_BENCH_VIEW_CACHE_BYTES",
            help="RAM for cached views (the runtime's DORMANT_VIEW_CACHE_BYTES; its default here)",
        ),
    ] = DEFAULT_VIEW_CACHE_BYTES,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/scale"),
    workers: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DORMANT_BENCH_WORKERS",
            help="run the runtime in this many worker processes on the store (0: inside the "
            "benchmark process); RSS is then per worker",
        ),
    ] = 0,
) -> None:
    """The agent_scale workload: RSS against agents, turns per second.

    One store writes ``OUT/summary.json``, ``OUT/waves.csv`` and ``OUT/rss.png``;
    several write ``OUT/<store>/...`` and one chart ``OUT/rss.png`` with a line each.
    """
    _require_extra("dormant bench scale")
    from .plot import plot_runs

    kinds = store or ["sqlite"]
    for kind in kinds:
        if kind not in STORES:
            console.print(f"[red]error:[/] unknown store {kind!r}: choose from {', '.join(STORES)}")
            raise typer.Exit(2)
    params: dict[str, object] = {
        "agents": agents,
        "turns": turns,
        "wave": wave,
        "concurrency": concurrency,
        "view_messages": view_messages,
        "view_bytes": view_bytes,
        "view_tokens": view_tokens,
        "view_cache_bytes": view_cache_bytes,
    }
    if workers:
        if "memory" in kinds:
            console.print("[red]error:[/] --workers needs a store processes can share (postgres, sqlite)")
            raise typer.Exit(2)
        params["workers"] = workers
    dirs = [out] if len(kinds) == 1 else [out / kind for kind in kinds]
    summaries = [_run_one(kind, params, d) for kind, d in zip(kinds, dirs, strict=True)]
    chart = plot_runs(dirs, out / "rss.png")
    console.print(_table(summaries))
    console.print(f"wrote {', '.join(str(d / 'summary.json') for d in dirs)} and {chart}")


@bench_app.command("context")
def context(
    store: Annotated[str, typer.Option(help="sqlite or postgres", envvar="DORMANT_BENCH_STORE")] = "sqlite",
    messages: Annotated[int, typer.Option(min=200, envvar="DORMANT_BENCH_MESSAGES")] = 10_000,
    blob_mb: Annotated[float, typer.Option(min=1, envvar="DORMANT_BENCH_BLOB_MB")] = 200.0,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/context"),
) -> None:
    """Bounded context: one thread grown to MESSAGES messages, one with a BLOB_MB MB tool output.

    Prints per-slice latency, history read from the store and RSS around message 100
    and at the end, and for a 1 MB and a BLOB_MB output; writes ``OUT/summary.json``.
    """
    _require_extra("dormant bench context")
    if store not in ("sqlite", "postgres"):
        console.print("[red]error:[/] --store must be sqlite or postgres")
        raise typer.Exit(2)
    payload = json.dumps({"kind": store, "messages": messages, "blob_mb": blob_mb, "out": str(out)})
    summary = _run_process(store, "dormant.bench.context", payload, out)
    table = Table(title="bounded context")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in _flatten(summary):
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else f"{value}")
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}")


def _flatten(data: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            rows.extend(_flatten(value, f"{prefix}{key}."))
        else:
            rows.append((f"{prefix}{key}", value))
    return rows


@bench_app.command("approvals")
def approvals(
    threads: Annotated[int, typer.Option(min=100, envvar="DORMANT_BENCH_THREADS")] = 1000,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/approvals"),
) -> None:
    """Waits for a person: RSS with THREADS waits open vs none, the oldest-100 listing,
    decision -> run latency, the expiry sweep's cost. Writes ``OUT/summary.json``."""
    import asyncio

    from .approvals import run_approvals_bench

    Console().print_json(json.dumps(asyncio.run(run_approvals_bench(out, threads))))


@bench_app.command("plot")
def plot(
    runs: Annotated[list[Path], typer.Argument(help="output directories of `dormant bench scale`")],
    out: Annotated[Path, typer.Option(help="PNG to write", envvar="DORMANT_BENCH_PLOT_OUT")] = Path(
        "bench-out/rss.png"
    ),
) -> None:
    """Merge several `bench scale` runs into one RSS-against-agents chart."""
    _require_extra("dormant bench plot")
    from .plot import plot_runs

    try:
        chart = plot_runs(runs, out)
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    console.print(f"wrote {chart}")


@bench_app.command("chaos")
def chaos(
    kills: Annotated[
        int, typer.Option(min=0, envvar="DORMANT_BENCH_KILLS", help="SIGKILLs to survive.")
    ] = 200,
    threads: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_THREADS")] = 500,
    turns: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_TURNS")] = 10,
    concurrency: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_CONCURRENCY")] = 32,
    lease_s: Annotated[
        float,
        typer.Option(
            min=0.1,
            envvar="DORMANT_BENCH_LEASE_S",
            help="Lease of threads and tool calls (long: a dead worker's come back by proof, not expiry).",
        ),
    ] = 30.0,
    seed: Annotated[
        int | None, typer.Option(envvar="DORMANT_BENCH_SEED", help="Seed of the kill times.")
    ] = None,
    store: Annotated[
        str,
        typer.Option(
            envvar="DORMANT_BENCH_STORE",
            help="sqlite, or postgres (DORMANT_BENCH_PG_DSN, else an embedded server).",
        ),
    ] = "sqlite",
    standby: Annotated[
        bool,
        typer.Option(
            envvar="DORMANT_BENCH_STANDBY",
            help="Run a standby worker that is never killed (resume then measures the store's recovery).",
        ),
    ] = True,
    pills: Annotated[
        int,
        typer.Option(min=0, envvar="DORMANT_BENCH_PILLS", help="Poison pills of each kind (crash, wedge)."),
    ] = 2,
    tool_attempts: Annotated[
        int, typer.Option(min=1, envvar="DORMANT_BENCH_TOOL_ATTEMPTS", help="Attempt cap of tool calls.")
    ] = 3,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/chaos"),
) -> None:
    """Kill -9 a worker at random moments, restart it each time, then verify the store.

    A standby worker runs beside it; poison pills (a tool that ends its worker, one that
    never returns) must end dead-lettered within their attempt cap. Writes
    ``OUT/summary.json`` (and ``OUT/runs.csv``); exits 1 if any check fails.
    """
    _require_extra("dormant bench chaos")
    from .chaos import ChaosConfig, run_chaos

    if store not in ("sqlite", "postgres"):
        raise typer.BadParameter(f"{store!r}: sqlite or postgres", param_hint="--store")
    config = ChaosConfig(
        out=out,
        threads=threads,
        turns=turns,
        kills=kills,
        concurrency=concurrency,
        lease_s=lease_s,
        seed=seed,
        store=store,
        standby=standby,
        pills=pills,
        tool_attempts=tool_attempts,
    )
    console.print(
        f"chaos on {store}: {threads} threads x {turns} turns, {kills} kills, concurrency {concurrency}, "
        f"lease {lease_s:g}s, {'a standby worker' if standby else 'no standby'}, {pills} pills of each "
        f"kind (cap {tool_attempts}), out {out}"
    )
    summary = run_chaos(config, echo=console.print)
    table = Table(title="chaos")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in summary.items():
        if key not in ("config", "problems"):
            table.add_row(key, str(value))
    console.print(table)
    for problem in summary["problems"][:20]:
        console.print(f"[red]problem:[/] {problem}")
    console.print(f"wrote {out / 'summary.json'}")
    if summary["passed"]:
        console.print(
            f"PASS: {summary['kills']} kills survived, {summary['inputs']:,} inputs verified, "
            f"recovery p50 {summary['recovery_p50_ms']} ms / p95 {summary['recovery_p95_ms']} ms, "
            f"kill → in-flight threads resumed p50 {summary['resume_p50_ms']} ms / "
            f"p95 {summary['resume_p95_ms']} ms ({summary['resume_measures']}), "
            f"{summary['pills_dead_lettered']}/{summary['pills']} poison pills dead-lettered "
            f"(at most {summary['pill_claims_max']} claims, {summary['pill_runs_max']} runs; "
            f"cap {summary['pill_attempt_cap']})",
            soft_wrap=True,
        )
        return
    console.print(
        f"FAIL: lost {summary['lost']}, duplicated {summary['duplicated']}, unpaired tool calls "
        f"{summary['unpaired_tool_calls']}, order violations {summary['order_violations']}, "
        f"poison violations {summary['poison_violations']}, integrity ok {summary['integrity_ok']} "
        f"after {summary['kills']} kills",
        soft_wrap=True,
    )
    raise typer.Exit(1)


@bench_app.command("governor")
def governor(
    threads: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_THREADS")] = 24,
    turns: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_TURNS")] = 3,
    concurrency: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_CONCURRENCY")] = 8,
    hog_mb: Annotated[
        int, typer.Option(min=1, envvar="DORMANT_BENCH_HOG_MB", help="MiB each tool call holds.")
    ] = 64,
    headroom_mb: Annotated[
        int,
        typer.Option(min=16, envvar="DORMANT_BENCH_HEADROOM_MB", help="Hard limit: start-up RSS + this."),
    ] = 256,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/governor"),
) -> None:
    """Tools that allocate far more than the hard limit allows; a 10 ms RSS watcher process.

    Writes ``OUT/summary.json``; exits 1 unless max RSS <= the hard limit and no input is lost.
    """
    from .governor import GovernorBenchConfig, launch

    config = GovernorBenchConfig(
        out=str(out),
        threads=threads,
        turns=turns,
        concurrency=concurrency,
        hog_mb=hog_mb,
        headroom_mb=headroom_mb,
    )
    console.print(
        f"governor: {threads} threads x {turns} turns, {hog_mb} MiB a tool call, concurrency "
        f"{concurrency}, hard limit = start-up RSS + {headroom_mb} MiB, out {out}"
    )
    summary = launch(config)
    table = Table(title="governor")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, value in _flatten({k: v for k, v in summary.items() if k != "config"}):
        table.add_row(key, str(value))
    console.print(table)
    console.print(f"wrote {out / 'summary.json'}")
    if not summary["passed"]:
        console.print("[red]FAIL[/]: RSS passed the hard limit or an input was lost")
        raise typer.Exit(1)
    console.print("PASS: RSS stayed under the hard limit and every input was answered")


@bench_app.command("recall")
def recall(
    memories: Annotated[
        int, typer.Option(min=100, envvar="DORMANT_BENCH_MEMORIES", help="Records for latency.")
    ] = (1_000_000),
    subjects: Annotated[int, typer.Option(min=10, envvar="DORMANT_BENCH_SUBJECTS")] = 10_000,
    rich: Annotated[
        int, typer.Option(min=1, envvar="DORMANT_BENCH_RICH", help="Subjects with a history.")
    ] = 600,
    embedder: Annotated[
        str, typer.Option(envvar="DORMANT_BENCH_EMBEDDER", help="minilm, multilingual or hashing.")
    ] = "minilm",
    seed: Annotated[int, typer.Option(envvar="DORMANT_BENCH_SEED")] = 7,
    queries: Annotated[
        int, typer.Option(min=10, envvar="DORMANT_BENCH_QUERIES", help="Latency samples.")
    ] = 1000,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/recall"),
    slices: Annotated[
        int,
        typer.Option(
            min=0,
            envvar="DORMANT_BENCH_SLICES",
            help="Run through real agent slices instead: the suite's queries as user "
            "inputs, then this many slices each with recall on and off at MEMORIES records.",
        ),
    ] = 0,
) -> None:
    """Recall quality on the seeded suite (hybrid and baselines), latency and RSS at MEMORIES records.

    With ``--slices N`` the same suite runs through real agent slices (scripted model,
    automatic recall into the prompt) and the slice latency is measured with recall on
    against off, with the ``--embedder`` (default MiniLM: the runtime's default, whose
    query embedding is part of what recall adds); writes ``OUT/slices.json``.

    Writes ``OUT/summary.json``; the suite is described in BENCHMARKS.md.
    """
    from .recall_eval import BENCH_EMBEDDERS

    if embedder not in BENCH_EMBEDDERS:
        console.print(f"[red]error:[/] --embedder must be one of {', '.join(BENCH_EMBEDDERS)}")
        raise typer.Exit(2)
    if slices:
        from .loop_recall import run as run_slices

        params = {
            "subjects": subjects,
            "rich": rich,
            "seed": seed,
            "memories": memories,
            "embedder": embedder,
        }
        result = run_slices(out, {**params, "per_subject": 10, "slices": slices})
        console.print_json(json.dumps(result))
        console.print(f"wrote {out / 'slices.json'}")
        return
    payload = json.dumps(
        {
            "out": str(out),
            "memories": memories,
            "subjects": subjects,
            "rich": rich,
            "embedder": embedder,
            "seed": seed,
            "latency_queries": queries,
            "zh_subjects": max(10, subjects // 5),
            "zh_rich": max(1, rich // 2),
        }
    )
    summary = _run_process("recall", "dormant.bench.recall", payload, out)
    table = Table(title="recall")
    for col in ("run", "recall@1", "recall@5", "mrr", "stale", "leak", "p50 ms", "p99 ms"):
        table.add_column(col, justify="right" if col != "run" else "left")
    baselines: dict[str, dict[str, object]] = summary["baselines"]  # type: ignore[assignment]
    rows = [("hybrid", summary), *baselines.items()]
    for name, fig in rows:
        table.add_row(
            name,
            *(
                f"{fig[k]}"
                for k in ("recall_at_1", "recall_at_5", "mrr", "stale_rate", "leak_rate", "p50_ms", "p99_ms")
            ),
        )
    console.print(table)
    _per_category(summary)
    console.print(f"rss {summary['rss_bytes']:,} bytes; wrote {out / 'summary.json'}")


def _per_category(summary: dict[str, object]) -> None:
    """Recall@1 and @5 per question kind and suite, without structure first -> with it."""
    cats: dict[str, dict[str, dict[str, dict[str, float]]]] = summary["per_category"]  # type: ignore[assignment]
    table = Table(title="recall per question kind (previous default -> hybrid)")
    for col in ("suite", "kind", "recall@1", "recall@5", "stale"):
        table.add_column(col, justify="left" if col in ("suite", "kind") else "right")
    for suite, runs in cats.items():
        after, before = runs["hybrid"], runs["previous_default"]
        for kind, fig in after.items():
            was = before.get(kind, {})
            table.add_row(
                suite,
                kind,
                *(
                    f"{was.get(k, 0):.3f} -> {fig[k]:.3f}"
                    for k in ("recall_at_1", "recall_at_5", "stale_rate")
                ),
            )
    console.print(table)


@bench_app.command("retention")
def retention(
    turns: Annotated[int, typer.Option(min=10, envvar="DORMANT_BENCH_TURNS")] = 2000,
    output_kb: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_OUTPUT_KB")] = 50,
    keep: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_KEEP")] = 200,
    every: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_GC_EVERY")] = 50,
    sample_every: Annotated[int, typer.Option(min=1, envvar="DORMANT_BENCH_SAMPLE_EVERY")] = 100,
    turn_s: Annotated[
        float, typer.Option(min=0.001, envvar="DORMANT_BENCH_TURN_S", help="Simulated seconds per turn.")
    ] = 60.0,
    horizon_s: Annotated[
        float,
        typer.Option(min=1, envvar="DORMANT_BENCH_HORIZON_S", help="Dedup horizon (simulated seconds)."),
    ] = 3600.0,
    out: Annotated[Path, typer.Option(envvar="DORMANT_BENCH_OUT")] = Path("bench-out/retention"),
    mode: Annotated[
        str,
        typer.Option(
            envvar="DORMANT_BENCH_MODE", help="Which runs: none, retention or both (none, then retention)."
        ),
    ] = "both",
) -> None:
    """Store size over TURNS tool turns of one agent (OUTPUT_KB KB outputs), without and with retention."""
    import asyncio

    from .retention import MODES, bench

    if mode not in (*MODES, "both"):
        raise typer.BadParameter(f"one of none, retention, both; not {mode!r}", param_hint="--mode")
    summary = asyncio.run(
        bench(
            out,
            turns=turns,
            output_kb=output_kb,
            keep=keep,
            every=every,
            sample_every=sample_every,
            turn_s=turn_s,
            horizon_s=horizon_s,
            modes=MODES if mode == "both" else (mode,),
        )
    )
    Console().print_json(json.dumps(summary))


# the server, MCP and content-parts benchmarks live in their own modules (this one stays short)
_register_server(bench_app)
_register_parts(bench_app)
