"""Running the server: uvicorn (uvloop) on the app, with optional slice worker processes.

:func:`serve_http` binds the port first (a busy one is a :class:`UsageError`), then opens
the store (an unreachable one raises its :class:`StoreError`), and only once uvicorn
accepts connections says where it serves: each failure is one line for the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence

import uvicorn
import uvloop
from fastapi import FastAPI

from ..errors import DormantError, StoreError, UsageError
from ..runtime import Runtime
from ..urls import redact, scrub
from .app import ServerConfig, create_app
from .guard import HttpLimits, guarded

#: Connections the kernel queues before uvicorn accepts them.
BACKLOG = 2048


class Server(uvicorn.Server):
    """uvicorn's server, with the signals left to :func:`serve_http`.

    uvicorn re-raises a captured SIGTERM once it has shut down, which would kill the
    process before the worker processes are stopped and the models closed.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Install nothing: :func:`serve_http` handles SIGINT and SIGTERM."""
        yield


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` (0: a free port) whose connections send at once.

    ``TCP_NODELAY`` is set on the listening socket, so accepted connections inherit it:
    without it a response written in two pieces (head, then body) waits for the
    client's delayed ACK, about 40 ms on Linux, on every request.

    The socket listens at once, so a port another process listens on fails here, as a
    :class:`UsageError` naming the address, before anything says it serves.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as exc:
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except (OSError, OverflowError) as exc:
        sock.close()
        reason = getattr(exc, "strerror", None) or str(exc)
        hint = (
            " (another process listens there: choose another --port)"
            if (getattr(exc, "errno", None) == errno.EADDRINUSE)
            else ""
        )
        raise UsageError(f"cannot listen on {host}:{port}: {reason.lower()}{hint}") from None
    return sock


def uvicorn_config(app: FastAPI, config: ServerConfig, *, graceful_s: int = 30) -> uvicorn.Config:
    """uvicorn's settings for ``app``: the guarded httptools protocol with ``config``'s
    connection limits (:mod:`.guard`), no uvicorn access log (the app writes its own)."""
    state = app.state.server
    limits = HttpLimits(
        header_timeout_s=config.header_timeout_s,
        body_timeout_s=config.body_timeout_s,
        max_header_bytes=config.max_header_bytes,
        max_headers=config.max_headers,
        on_refuse=lambda reason: state.http.refused.labels(reason).inc(),
    )
    return uvicorn.Config(
        app,
        http=guarded(limits),
        log_level="warning",
        lifespan="on",
        access_log=False,
        timeout_graceful_shutdown=graceful_s,
    )


async def open_runtime(runtime: Runtime) -> None:
    """Open the runtime's store, or raise one DormantError saying why not (never a bare
    driver error: its traceback would be the only message)."""
    try:
        await runtime.open()
    except DormantError:
        raise
    except Exception as exc:
        text = scrub(" ".join(str(exc).split()) or type(exc).__name__)
        raise StoreError(f"cannot open {redact(runtime.store.url)}: {text[:500]}") from None


async def serve_http(
    runtime: Runtime,
    *,
    host: str,
    port: int,
    config: ServerConfig,
    sock: socket.socket | None = None,
    worker_command: tuple[Sequence[str], Mapping[str, str]] | None = None,
    workers: int = 1,
    say: Callable[[str], None] = print,
) -> None:
    """Serve until SIGINT/SIGTERM (then running slices get ``stop_grace_s`` to finish, are
    cancelled with their inputs kept pending, and the store closes).

    With ``worker_command`` (argv, environment), ``workers`` processes running it
    (``dormant run``) execute the slices under a :class:`~dormant.ops.workers.Supervisor`;
    this process only serves HTTP.

    The port is bound (unless ``sock`` is a socket :func:`listen` made) and the store
    opened before anything is said; ``say`` tells where it serves once connections are
    accepted.
    """
    app = create_app(runtime, config)
    server = Server(uvicorn_config(app, config))
    if sock is None:
        sock = listen(host, port)
    try:
        await open_runtime(runtime)
    except BaseException:
        sock.close()
        raise
    supervisor = None
    supervising: asyncio.Task[int] | None = None
    if worker_command is not None:
        from ..ops.workers import Supervisor

        argv, env = worker_command
        supervisor = Supervisor(argv, workers, env=dict(env), say=say)
        supervising = asyncio.create_task(supervisor.run())
        await asyncio.sleep(0)  # it installs its signal handlers first; ours replace them
    names = ", ".join(sorted(runtime.agents))
    bound = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        say(f"dormant serving http://{where}:{bound} on {redact(runtime.store.url)} (agents: {names})")

    announcing = asyncio.create_task(announce())
    loop = asyncio.get_running_loop()
    signals = 0

    cancelling: list[asyncio.Task[int]] = []

    async def cancel_later() -> int:
        # running slices get the grace, then are cancelled with their inputs kept pending
        await asyncio.sleep(runtime.settings.stop_grace_s)
        runtime.stop()
        return await runtime.cancel_slices()

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        server.should_exit = True  # stop accepting; open requests finish
        app.state.server.hub.close()  # event streams end now, or shutdown would wait for them
        if not cancelling:
            cancelling.append(asyncio.create_task(cancel_later()))
        if signals > 1:
            server.force_exit = True

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
    try:
        await server.serve(sockets=[sock])
    finally:
        announcing.cancel()
        for task in cancelling:
            task.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        sock.close()
        if supervisor is not None and supervising is not None:
            supervisor.stop()
            await supervising


def run(coro_factory: Callable[[], object]) -> None:
    """Run the server's coroutine on a uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro_factory())  # type: ignore[arg-type]
