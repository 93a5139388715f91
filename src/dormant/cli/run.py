"""``dormant run``: host the agents until a signal (or until idle), in this process or in
supervised worker processes (registered by :mod:`dormant.cli.main`)."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Annotated

import typer

from ..config import DEFAULT_STORE
from ..errors import UsageError
from ..runtime import Runtime
from ..store import open_store
from ..urls import redact
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
    SystemOpt,
    TokenizerOpt,
    WorkersOpt,
    agents_for,
    close_models,
    server_notices,
    worker_command,
)
from .apps import DEFAULT_BASE_URL, SCRIPTED
from .base import StoreOpt, announce_if_new, err, fail, out, run_async, settings_for


def run(
    store: StoreOpt = DEFAULT_STORE,
    until_idle: Annotated[
        bool,
        typer.Option("--until-idle", envvar="DORMANT_UNTIL_IDLE", help="Exit once no work is left."),
    ] = False,
    concurrency: ConcurrencyOpt = None,
    app_spec: AppOpt = None,
    model: ModelOpt = SCRIPTED,
    base_url: BaseUrlOpt = DEFAULT_BASE_URL,
    system: SystemOpt = None,
    workers: WorkersOpt = 1,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            envvar="DORMANT_METRICS_PORT",
            min=0,
            max=65535,
            help="Serve Prometheus metrics at http://HOST:PORT/metrics (0: any free port; one worker).",
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option("--metrics-host", envvar="DORMANT_METRICS_HOST", help="Address of --metrics-port."),
    ] = "127.0.0.1",
    context_window: ContextWindowOpt = None,
    max_output: MaxOutputOpt = None,
    model_timeout: ModelTimeoutOpt = None,
    stream_timeout: StreamTimeoutOpt = None,
    tokenizer: TokenizerOpt = None,
) -> None:
    """Run the agents until SIGINT/SIGTERM or, with --until-idle, until idle.

    On SIGINT/SIGTERM running slices get DORMANT_STOP_GRACE_S (2 s) to finish, then are
    cancelled: they commit nothing and their inputs stay pending for the next run."""
    knobs = ModelKnobs(
        context_window=context_window,
        max_output=max_output,
        model_timeout=model_timeout,
        stream_timeout=stream_timeout,
        tokenizer=tokenizer,
    )
    if workers > 1:
        if metrics_port is not None:
            fail(UsageError("--metrics-port serves one process: run workers with --workers 1 each"))
        run_workers(store, workers, until_idle, concurrency, app_spec, model, base_url, system, knobs)
        return

    async def go() -> None:
        settings = settings_for(store, concurrency=concurrency, **knobs.settings())
        agents = agents_for(app_spec, model, base_url, system, knobs)
        try:
            for notice in await server_notices(agents):
                err.print(f"warning: {notice}", style="yellow")
            rt = Runtime(settings.store, agents, settings=settings)
            await announce_if_new(rt.store)
            async with rt:
                if metrics_port is None:
                    await serve(rt, until_idle=until_idle)
                    return
                from ..ops.exporter import Exporter, serving

                async with serving(Exporter(rt), metrics_port, metrics_host) as port:
                    err.print(f"metrics at http://{metrics_host}:{port}/metrics", style="dim")
                    await serve(rt, until_idle=until_idle)
        finally:
            await close_models(agents)

    run_async(go())


def run_workers(
    store: str,
    workers: int,
    until_idle: bool,
    concurrency: int | None,
    app_spec: str | None,
    model: str,
    base_url: str,
    system: str | None,
    knobs: ModelKnobs | None = None,
) -> None:
    """``dormant run --workers N``: N single-process workers under a :class:`Supervisor`."""
    from ..ops.workers import Supervisor

    knobs = knobs or ModelKnobs()
    settings = settings_for(store, concurrency=concurrency, **knobs.settings())  # validated once, here
    if not open_store(settings.store).persistent:
        fail(
            UsageError(
                f"{redact(settings.store)} lives in one process: --workers needs sqlite:///... or postgresql://..."
            )
        )
    argv, env = worker_command(
        settings.store,
        until_idle=until_idle,
        concurrency=concurrency,
        app_spec=app_spec,
        model=model,
        base_url=base_url,
        system=system,
        knobs=knobs,
    )
    supervisor = Supervisor(argv, workers, env=env, say=lambda line: err.print(line, style="dim"))
    err.print(f"dormant supervising {workers} workers on {redact(settings.store)}", style="dim")
    code = asyncio.run(supervisor.run())
    out.print(f"workers stopped (exit {code})")
    if code:
        raise typer.Exit(code)


async def serve(rt: Runtime, *, until_idle: bool) -> None:
    """Run ``rt`` with graceful stop on the first SIGINT/SIGTERM, abort on the second."""
    loop = asyncio.get_running_loop()
    names = ", ".join(sorted(rt.agents))
    mode = "until idle" if until_idle else "until Ctrl-C"
    task = asyncio.create_task(rt.run_until_idle() if until_idle else rt.run())
    stop_requested = asyncio.Event()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            grace = rt.settings.stop_grace_s
            err.print(
                f"stopping: running slices get {grace:g}s, then are cancelled with their inputs kept "
                "(signal again to abort now)",
                style="yellow",
            )
            stop_requested.set()
        else:
            task.cancel()

    async def stopper() -> None:
        # Runtime.stop() before run() has begun is lost, so repeat it until the run ends
        await stop_requested.wait()
        deadline = time.monotonic() + rt.settings.stop_grace_s
        cancelled = False
        while not task.done():
            rt.stop()
            if not cancelled and time.monotonic() >= deadline:
                cancelled = True
                count = await rt.cancel_slices()  # their inputs stay pending
                if count:
                    err.print(
                        f"cancelled {count} running slice(s); their inputs stay pending", style="yellow"
                    )
            await asyncio.sleep(0.05)

    stopping = asyncio.create_task(stopper())

    installed: list[signal.Signals] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            pass
    # printed once the handlers are in place: a signal from now on stops gracefully
    err.print(
        f"dormant running on {redact(rt.store.url)} (agents: {names}; "
        f"concurrency {rt.settings.concurrency}) {mode}",
        style="dim",
    )
    started = time.perf_counter()
    aborted = False
    try:
        await task
    except asyncio.CancelledError:
        if signals < 2:
            raise
        aborted = True
    finally:
        stopping.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
    s = rt.stats
    out.print(
        f"{'aborted' if aborted else 'stopped'} after {time.perf_counter() - started:.1f}s: "
        f"{s.slices} slices, {s.completions} completions, {s.tool_calls} tool calls, "
        f"{s.slice_failures} slice failures, {s.tool_failures} tool failures"
    )
