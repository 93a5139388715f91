"""The ``dormant`` command line: init, run, serve, tenants, send, chat, threads, show, export, status,
retry, doctor, backup, restore, demo, bench (``show`` and ``export`` are in :mod:`dormant.cli.history`,
``backup`` and ``restore`` in :mod:`dormant.cli.backup`, ``serve`` in :mod:`dormant.cli.serve`, ``tenants``
in :mod:`dormant.cli.tenants`, shared plumbing in :mod:`dormant.cli.base` and
:mod:`dormant.cli.agents`).

Every option has a ``DORMANT_*`` environment variable, shown in ``--help``.
Settings are validated once (:meth:`Settings.from_env`). Expected errors
(:class:`~dormant.errors.DormantError`) print one ``error: ...`` line on stderr
and exit with 2 for the caller's mistakes (:class:`UsageError` and its
subclasses) and 1 for operational failures; no traceback. Every listing is
paged: no command prints an unbounded list.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from typing import Annotated, TextIO

import msgspec
import typer
from rich.console import JustifyMethod
from rich.table import Table
from rich.text import Text

from ..config import DEFAULT_STORE
from ..errors import DormantError, UsageError
from ..logs import JsonFormatter, fields
from ..urls import redact, scrub
from .agents import (
    AppOpt,
    BaseUrlOpt,
    ConcurrencyOpt,
    ContextWindowOpt,
    MaxOutputOpt,
    ModelKnobs,
    ModelOpt,
    ModelTimeoutOpt,
    StreamTimeoutOpt,
    TokenizerOpt,
    agents_for,
    close_models,
    server_notices,
)
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .backup import backup, restore
from .base import (
    LimitOpt,
    StoreOpt,
    clip,
    err,
    fail,
    opened_store,
    out,
    run_async,
    settings_for,
    when,
)
from .chat import chat, send
from .demo import DEFAULT_DEMO_STORE, demo_command, human_bytes
from .history import export, show
from .retry import AllFailedOpt, SinceOpt, print_retry_all
from .run import run
from .status import mcp_counts, mcp_rows, model_rows, server_rows, server_table_rows

app = typer.Typer(
    name="dormant",
    help="Host very many long-lived LLM agent sessions; memory is bounded by the work in flight.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold API keys
)

# -- shared options (more in cli_base) -----------------------------------------------------

CursorOpt = Annotated[
    str | None,
    typer.Option("--cursor", envvar="DORMANT_CURSOR", help="Resume after this cursor (printed by a page)."),
]


# -- plumbing (more in cli_base) -----------------------------------------------------------


class EventFormatter(logging.Formatter):
    """``time level logger event key=value ...``: the event name, then the record's extras."""

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v!r}" for k, v in fields(record).items())
        stamp = datetime.fromtimestamp(record.created).strftime("%H:%M:%S")
        line = f"{stamp} {record.levelname.lower()} {record.name} {record.getMessage()}"
        if extras:
            line += " " + extras
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return scrub(line)  # no store password in a log line, whoever built the text


class LogLevel(StrEnum):
    """Levels accepted by ``--log-level``."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormat(StrEnum):
    """Formats accepted by ``--log-format``."""

    text = "text"
    json = "json"


class StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler that writes to whatever ``sys.stderr`` is when a record comes: under a live
    display (chat's spinner) rich swaps it, and the line then prints above the spinner, not
    over it."""

    def __init__(self) -> None:
        super().__init__()

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:
        pass  # always the current sys.stderr


def setup_logging(level: str, fmt: str = "text") -> None:
    """Send dormant's structured logs to stderr at ``level``, as text or JSON lines."""
    handler = StderrHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else EventFormatter())
    root = logging.getLogger("dormant")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False


@app.callback()
def main_options(
    log_level: Annotated[
        LogLevel,
        typer.Option(
            "--log-level",
            envvar="DORMANT_LOG_LEVEL",
            case_sensitive=False,
            help="Level of the structured logs written to stderr.",
        ),
    ] = LogLevel.warning,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format",
            envvar="DORMANT_LOG_FORMAT",
            case_sensitive=False,
            help="text, or json: one object a line with thread, slice and call ids.",
        ),
    ] = LogFormat.text,
) -> None:
    """Host very many long-lived LLM agent sessions; memory is bounded by the work in flight."""
    setup_logging(log_level.value, log_format.value)


# -- commands ------------------------------------------------------------------------------


@app.command()
def init(store: StoreOpt = DEFAULT_STORE) -> None:
    """Create the store (or migrate it to this version's schema)."""

    async def go() -> None:
        settings = settings_for(store)
        async with opened_store(settings, announce=False) as st:
            status = await st.status()
        out.print(f"store {redact(settings.store)} ready (schema version {status.schema_version})")
        if not st.persistent:
            out.print(
                f"note: {redact(settings.store)} lives only as long as one process; "
                "use sqlite:///path.db to keep data"
            )

    run_async(go())


app.command()(run)


@app.command()
def threads(
    store: StoreOpt = DEFAULT_STORE,
    cursor: CursorOpt = None,
    limit: LimitOpt = 50,
    failed: Annotated[
        bool,
        typer.Option("--failed", envvar="DORMANT_FAILED", help="Only failed threads, with the reason."),
    ] = False,
) -> None:
    """List threads by id, one page at a time (with --failed: only failed threads and why)."""

    async def go() -> None:
        examined = 0
        async with opened_store(settings_for(store)) as st:
            if failed:
                from ..ops.doctor import failed_threads

                rows, next_cursor, examined = await failed_threads(st, cursor, limit)
            else:
                page = await st.list_threads(cursor=cursor, limit=limit)
                rows, next_cursor = list(page.items), page.next_cursor
        table = Table(show_edge=False, pad_edge=False)
        columns: list[tuple[str, JustifyMethod]] = [
            ("thread", "left"),
            ("agent", "left"),
            ("status", "left"),
            ("msgs", "right"),
            ("wait", "right"),
            ("fails", "right"),
            ("updated", "left"),
        ]
        show_errors = any(row.error for row in rows)
        if show_errors:
            columns.append(("error", "left"))
        for name, justify in columns:
            # only ids and errors fold: the other columns are short
            table.add_column(name, justify=justify, overflow="fold", no_wrap=name not in ("thread", "error"))
        for row in rows:
            status = Text(row.status, style="red" if row.status == "failed" else "green")
            cells: list[str | Text] = [
                row.id,
                row.agent,
                status,
                str(row.last_seq),
                str(row.awaiting),
                str(row.failed_attempts),
                when(row.updated_at),
            ]
            if show_errors:
                cells.append(Text(clip(row.error or "", 300), style="red"))
            table.add_row(*cells)
        if rows:
            out.print(table)
        else:
            out.print("(no failed threads)" if failed else "(no threads)")
        if failed and rows:
            out.print("fix the cause, then `dormant retry THREAD` makes a failed thread run again")
        if next_cursor is not None:
            flag = " --failed" if failed else ""
            scanned = f"examined {examined:,} threads; " if failed else ""
            out.print(f"{scanned}next cursor: {next_cursor}  (dormant threads{flag} --cursor {next_cursor})")

    run_async(go())


# history commands live in cli_history; registered here to keep the order of `--help`
app.command()(show)
app.command()(send)
app.command()(chat)
app.command()(export)
app.command()(backup)
app.command()(restore)


@app.command()
def status(
    store: StoreOpt = DEFAULT_STORE,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DORMANT_JSON", help="Print machine-readable JSON.")
    ] = False,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    context_window: ContextWindowOpt = None,
    metrics: Annotated[
        str | None,
        typer.Option(
            "--metrics",
            envvar="DORMANT_STATUS_METRICS",
            help="URL of a running worker's or server's /metrics (dormant run --metrics-port, "
            "dormant serve): also show its MCP calls, failures, timeouts and restarts per server.",
        ),
    ] = None,
    metrics_token: Annotated[
        str | None,
        typer.Option(
            "--metrics-token",
            envvar="DORMANT_METRICS_TOKEN",
            help="Bearer token that /metrics requires, if any (prefer the variable).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Counts: threads by state, ready/leased, backlog, outbox, dead letters, messages, sizes.

    With a served --model (or --app), also what its server says: its context size, and a
    warning when the declared window is larger or its chat template cannot use the
    agent's tools (the same check `run` and `serve` make at start). With --metrics, the MCP
    counts of that running process (MCP servers run in workers, not in the store)."""

    async def go() -> None:
        settings = settings_for(store)
        mcp = await mcp_counts(metrics, metrics_token) if metrics else None
        async with opened_store(settings) as st:
            s = await st.status()
            waits, oldest_wait = await st.open_approvals()
        servers: list[dict[str, object]] = []
        if app_spec is not None or model != SCRIPTED:
            agents = agents_for(app_spec, model, base_url, None, ModelKnobs(context_window=context_window))
            try:
                servers = await server_rows(agents)
            finally:
                await close_models(agents)
        if as_json:
            data = {"store": redact(settings.store), **msgspec.structs.asdict(s), "model_servers": servers}
            if mcp is not None:
                data["mcp"] = mcp
            data["approvals_open"], data["approvals_oldest_requested_at"] = waits, oldest_wait
            sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
            return
        title = f"dormant status — {redact(settings.store)}"
        table = Table(title=title, show_header=False, title_justify="left")
        table.add_column("what", style="bold")
        table.add_column("count", justify="right")

        def group(name: str, counts: dict[str, int], keys: Sequence[str]) -> None:
            names = list(keys) + sorted(k for k in counts if k not in keys)
            table.add_row(name, ", ".join(f"{k} {counts.get(k, 0):,}" for k in names))

        group("threads", s.threads_by_status, ["active", "failed"])
        table.add_row("ready / leased", f"{s.threads_ready:,} / {s.threads_leased:,}")
        if s.ready_by_agent:  # a worker claims only its agents' threads: the others wait
            table.add_row("waiting, by agent", ", ".join(f"{a} {n:,}" for a, n in s.ready_by_agent.items()))
        group("backlog", s.backlog_by_priority, ["P0", "P1", "P2"])
        group("outbox", s.outbox_by_status, ["pending", "running", "done", "dead", "unknown"])
        table.add_row("dead letters", Text(f"{s.dead_letters:,}", style="red" if s.dead_letters else ""))
        table.add_row("messages", f"{s.messages:,}")
        if waits:  # calls and questions waiting for a person (dormant approvals list)
            table.add_row("waiting for a person", f"{waits:,}, oldest since {when(oldest_wait or 0)}")
        for label, value in model_rows(s):  # tokens counted by the model servers, threads waiting on one
            table.add_row(label, value)
        for label, value in server_table_rows(servers):  # what the model servers say of themselves
            table.add_row(label, value)
        for label, value in mcp_rows(mcp) if mcp is not None else []:  # MCP counts of a running process
            table.add_row(label, value)
        table.add_row("db / wal size", f"{human_bytes(s.db_bytes)} / {human_bytes(s.wal_bytes)}")
        table.add_row("schema version", str(s.schema_version))
        out.print(table)

    run_async(go())


@app.command()
def retry(
    thread: Annotated[str | None, typer.Argument(help="Thread id (or --all-failed).")] = None,
    store: StoreOpt = DEFAULT_STORE,
    all_failed: AllFailedOpt = False,
    since: SinceOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    context_window: ContextWindowOpt = None,
    max_output: MaxOutputOpt = None,
    model_timeout: ModelTimeoutOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Reactivate a failed thread; its pending inputs run on the next `dormant run`.

    The model options are those the next `dormant run` should use: they are checked here
    as `run` checks them (the budget validated; with a served --model, a warning when the
    server's context is smaller than --context-window or its template cannot use tools),
    so a thread that failed over the window is not retried into the same failure."""
    if (thread is None) == (not all_failed) or (since is not None and not all_failed):
        fail(UsageError("give a thread id, or --all-failed [--since ...]"))
    knobs = ModelKnobs(
        context_window=context_window,
        max_output=max_output,
        model_timeout=model_timeout,
        stream_timeout=stream_timeout,
        tokenizer=tokenizer,
    )

    async def go() -> None:
        settings = settings_for(store, **knobs.settings())
        if app_spec is not None or model != SCRIPTED or knobs != ModelKnobs():
            agents = agents_for(app_spec, model, base_url, None, knobs)
            try:
                for notice in await server_notices(agents):
                    err.print(f"warning: {notice}", style="yellow")
            finally:
                await close_models(agents)
        async with opened_store(settings) as st:
            if all_failed:
                await print_retry_all(st, since)
                return
            assert thread is not None
            before = await st.get_thread(thread)
            row = await st.retry_thread(thread)
        if before.status == "failed":
            out.print(f"thread {row.id} is active again (was failed: {before.error})")
        else:
            out.print(f"thread {row.id} was not failed; its retry backoff was reset")

    run_async(go())


@app.command()
def delete(
    thread: Annotated[str, typer.Argument(help="Thread id.")],
    yes: Annotated[
        bool, typer.Option("--yes", envvar="DORMANT_DELETE_YES", help="Delete without asking.")
    ] = False,
    store: StoreOpt = DEFAULT_STORE,
) -> None:
    """Delete a thread, the threads it spawned, their histories, and the blobs no one else uses."""
    if not yes and not typer.confirm(f"delete thread {thread!r} and every thread it spawned?"):
        raise typer.Exit(1)

    async def go() -> None:
        async with opened_store(settings_for(store)) as st:
            deleted = await st.delete_thread(thread)
        out.print(f"deleted {deleted} thread(s): {thread} and its descendants")

    run_async(go())


@app.command()
def demo(
    agents: Annotated[
        int, typer.Option("--agents", envvar="DORMANT_DEMO_AGENTS", min=1, help="Agents (threads) to run.")
    ] = 2000,
    turns: Annotated[
        int, typer.Option("--turns", envvar="DORMANT_DEMO_TURNS", min=1, help="Turns per agent.")
    ] = 5,
    # a separate variable from DORMANT_STORE on purpose: the demo deletes its store first
    store: Annotated[
        str,
        typer.Option(
            "--store",
            envvar="DORMANT_DEMO_STORE",
            help="Store of the demo; a SQLite file is deleted and recreated on each run.",
        ),
    ] = DEFAULT_DEMO_STORE,
    concurrency: ConcurrencyOpt = None,
) -> None:
    """Run many scripted coding agents (2 completions + 1 async tool call per turn) and print figures."""
    run_async(demo_command(out, agents=agents, turns=turns, store=store, concurrency=concurrency))


@app.command()
def doctor(
    store: StoreOpt = DEFAULT_STORE,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            envvar="DORMANT_DOCTOR_QUICK",
            help="SQLite: quick_check instead of the full integrity check; PostgreSQL: no amcheck.",
        ),
    ] = False,
    stuck_after: Annotated[
        float,
        typer.Option(
            "--stuck-after",
            envvar="DORMANT_DOCTOR_STUCK_AFTER",
            min=0,
            help="Seconds after which ready work nobody took counts as overdue.",
        ),
    ] = 300.0,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="DORMANT_JSON", help="Print machine-readable JSON.")
    ] = False,
) -> None:
    """Check a store: integrity (amcheck on PostgreSQL), schema, WAL size, expired leases and
    silent workers, stuck or dead outbox entries, failed threads, replication. Read-only.
    Exit 0 healthy, 3 warnings, 1 damaged or broken."""
    from ..ops.doctor import diagnose, render

    try:
        report = diagnose(settings_for(store).store, quick=quick, stuck_after_s=stuck_after)
    except DormantError as exc:
        fail(exc)
    if as_json:
        sys.stdout.write(json.dumps(report.as_json(), indent=2, sort_keys=True) + "\n")
        raise typer.Exit(report.exit_code)
    for line in render(report):
        out.print(line)
    raise typer.Exit(report.exit_code)


def _mount_bench() -> None:
    from ..bench.cli import bench_app

    app.add_typer(bench_app, name="bench")
    from .memory import memory_app

    app.add_typer(memory_app, name="memory")


_mount_bench()


def _mount_serve() -> None:
    from .gc import gc
    from .mcp import mcp_app
    from .serve import serve_command
    from .tenants import tenants_app
    from .ui import ui_command

    app.command("serve")(serve_command)
    app.command("ui")(ui_command)
    app.add_typer(tenants_app, name="tenants")
    app.command()(gc)
    app.add_typer(mcp_app, name="mcp")
    from .approvals import answer, approvals_app

    app.add_typer(approvals_app, name="approvals")
    app.command("answer")(answer)


_mount_serve()


def main() -> None:
    """Entry point of the ``dormant`` script."""
    try:
        app(prog_name="dormant")
    except DormantError as exc:  # raised outside a command's own handling
        try:
            fail(exc)
        except typer.Exit as done:
            sys.exit(done.exit_code)


if __name__ == "__main__":
    main()
