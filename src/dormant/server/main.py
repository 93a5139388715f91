"""Running the server: uvicorn (uvloop) on the app, with optional slice worker processes."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import uvicorn
import uvloop

from ..runtime import Runtime
from .app import ServerConfig, create_app
from .tenants import TenantDirectory


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
        uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on", access_log=False)
    )
    supervisor = None
    supervising: asyncio.Task[int] | None = None
    if worker_argv is not None:
        from ..workers import Supervisor

        supervisor = Supervisor(worker_argv, workers, say=say)
        supervising = asyncio.create_task(supervisor.run())
    names = ", ".join(sorted(runtime.agents))
    say(f"dormant serving http://{host}:{port} on {runtime.store.url} (agents: {names})")
    try:
        await server.serve()
    finally:
        if supervisor is not None and supervising is not None:
            supervisor.stop()
            await supervising


def run(coro_factory: Callable[[], object]) -> None:
    """Run the server's coroutine on a uvloop event loop."""
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(coro_factory())  # type: ignore[arg-type]
