"""Running the server: uvicorn (uvloop) on the app, with optional slice worker processes."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence

import uvicorn
import uvloop

from ..runtime import Runtime
from ..urls import redact
from .app import ServerConfig, create_app


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
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


async def serve_http(
    runtime: Runtime,
    *,
    host: str,
    port: int,
    config: ServerConfig,
    worker_command: tuple[Sequence[str], Mapping[str, str]] | None = None,
    workers: int = 1,
    say: Callable[[str], None] = print,
) -> None:
    """Serve until SIGINT/SIGTERM (then running slices finish and the store closes).

    With ``worker_command`` (argv, environment), ``workers`` processes running it
    (``dormant run``) execute the slices under a :class:`~dormant.ops.workers.Supervisor`;
    this process only serves HTTP.
    """
    app = create_app(runtime, config)
    server = Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=30
        )
    )
    sock = listen(host, port)
    supervisor = None
    supervising: asyncio.Task[int] | None = None
    if worker_command is not None:
        from ..ops.workers import Supervisor

        argv, env = worker_command
        supervisor = Supervisor(argv, workers, env=dict(env), say=say)
        supervising = asyncio.create_task(supervisor.run())
        await asyncio.sleep(0)  # it installs its signal handlers first; ours replace them
    names = ", ".join(sorted(runtime.agents))
    say(f"dormant serving http://{host}:{port} on {redact(runtime.store.url)} (agents: {names})")
    loop = asyncio.get_running_loop()
    signals = 0

    def on_signal() -> None:
        nonlocal signals
        signals += 1
        server.should_exit = True  # stop accepting; open requests and running slices finish
        app.state.server.hub.close()  # event streams end now, or shutdown would wait for them
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
