"""Running the server: uvicorn (uvloop) on the app, with optional slice worker processes."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence

import uvicorn
import uvloop

from ..runtime import Runtime
from .app import ServerConfig, create_app
from .tenants import TenantDirectory


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
    tenants: TenantDirectory,
    *,
    host: str,
    port: int,
    config: ServerConfig,
    worker_argv: Sequence[str] | None = None,
    workers: int = 1,
    say: Callable[[str], None] = print,
) -> None:
    """Serve until SIGINT/SIGTERM (then running slices finish and the store closes).

    With ``worker_argv``, ``workers`` processes running it (``dormant run``) execute the
    slices under a :class:`~dormant.workers.Supervisor`; this process only serves HTTP.
    """
    app = create_app(runtime, tenants, config)
    server = uvicorn.Server(
        uvicorn.Config(
            app, log_level="warning", lifespan="on", access_log=False, timeout_graceful_shutdown=30
        )
    )
    sock = listen(host, port)
    supervisor = None
    supervising: asyncio.Task[int] | None = None
    if worker_argv is not None:
        from ..workers import Supervisor

        supervisor = Supervisor(worker_argv, workers, say=say)
        supervising = asyncio.create_task(supervisor.run())
    names = ", ".join(sorted(runtime.agents))
    say(f"dormant serving http://{host}:{port} on {runtime.store.url} (agents: {names})")
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        if supervisor is not None and supervising is not None:
            supervisor.stop()
            await supervising


def run(coro_factory: Callable[[], object]) -> None:
    """Run the server's coroutine on a uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro_factory())  # type: ignore[arg-type]
