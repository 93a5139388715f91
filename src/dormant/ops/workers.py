"""Several worker processes on one store: what ``dormant run --workers N`` runs.

The supervisor starts N ordinary single-process workers (``dormant run``), each with
its own event loop, concurrency and connections, and supervises them:

* the first SIGINT/SIGTERM is passed on to every worker as SIGTERM: they stop
  claiming, their running slices finish, they exit; a second signal kills them;
* a worker that dies (crash, OOM kill, ``kill -9``) is restarted after a backoff;
  until then its leases expire and the other workers take its threads over;
* a worker that exits 0 is done (``--until-idle``: there was no work left), and
  one that exits 2 was misconfigured, which stops them all.

Workers share nothing but the store: leases, ``SKIP LOCKED`` claims and unique keys
keep them correct, so workers on other hosts pointed at the same PostgreSQL
database join in the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: A worker that ran this long before it died is restarted without backoff growth.
STABLE_S = 60.0
MAX_BACKOFF_S = 30.0


@dataclass
class _Worker:
    index: int
    proc: asyncio.subprocess.Process | None = None
    started: float = 0.0
    backoff: float = 1.0
    restarts: int = 0
    exits: list[int] = field(default_factory=list)


class Supervisor:
    """Runs ``argv`` as ``count`` worker processes until they are done or stopped.

    ``say`` prints one line for a person (starts, deaths, restarts, stop).
    """

    def __init__(
        self,
        argv: Sequence[str],
        count: int,
        *,
        env: Mapping[str, str] | None = None,
        say: Callable[[str], None] = print,
        restart: bool = True,
    ) -> None:
        if count < 1:
            raise ValueError("a supervisor needs at least one worker")
        self.argv = list(argv)
        self.count = count
        self.env = dict(os.environ if env is None else env)
        self.say = say
        self.restart = restart
        self.workers = [_Worker(index=i) for i in range(count)]
        self.stopping = False
        self._signals = 0
        self._changed = asyncio.Event()

    def _env_for(self, worker: _Worker) -> dict[str, str]:
        env = dict(self.env)
        # worker ids only label leases, but keep them distinct if one was given
        if env.get("DORMANT_WORKER_ID"):
            env["DORMANT_WORKER_ID"] = f"{env['DORMANT_WORKER_ID']}-{worker.index}"
        return env

    async def _start(self, worker: _Worker) -> None:
        # a session of its own: a terminal's Ctrl-C reaches the supervisor only, which
        # then stops the workers once (two signals would abort their running slices)
        worker.proc = await asyncio.create_subprocess_exec(
            *self.argv, env=self._env_for(worker), stdin=asyncio.subprocess.DEVNULL, start_new_session=True
        )
        worker.started = time.monotonic()
        self.say(f"worker {worker.index} started (pid {worker.proc.pid})")

    def _signal(self, sig: int) -> None:
        for worker in self.workers:
            if worker.proc is not None and worker.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    worker.proc.send_signal(sig)

    def stop(self) -> None:
        """First call: SIGTERM every worker (graceful). Second call: SIGKILL them."""
        self._signals += 1
        self.stopping = True
        if self._signals == 1:
            self.say("stopping workers: running slices finish (signal again to kill them)")
            self._signal(signal.SIGTERM)
        else:
            self._signal(signal.SIGKILL)
        self._changed.set()

    async def run(self) -> int:
        """Start the workers and supervise them; the exit code for the command.

        0 when every worker finished or stopped cleanly, 2 when a worker reported a
        usage error, 1 otherwise.
        """
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, self.stop)
                installed.append(sig)
            except (NotImplementedError, RuntimeError):
                pass
        try:
            for worker in self.workers:
                await self._start(worker)
            return await self._supervise()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            self._signal(signal.SIGKILL)  # nothing outlives the supervisor

    async def _supervise(self) -> int:
        code = 0
        waits: dict[asyncio.Task[Any], _Worker] = {}
        pending_restarts: dict[asyncio.Task[Any], _Worker] = {}
        for worker in self.workers:
            assert worker.proc is not None
            waits[asyncio.create_task(worker.proc.wait())] = worker
        while waits or pending_restarts:
            changed = asyncio.create_task(self._changed.wait())
            done, _ = await asyncio.wait(
                [*waits, *pending_restarts, changed], return_when=asyncio.FIRST_COMPLETED
            )
            changed.cancel()
            self._changed.clear()
            if self.stopping:
                for task in pending_restarts:
                    task.cancel()
                pending_restarts.clear()
            for task in done:
                if task in pending_restarts:
                    worker = pending_restarts.pop(task)
                    if not self.stopping and not task.cancelled():
                        await self._start(worker)
                        assert worker.proc is not None
                        waits[asyncio.create_task(worker.proc.wait())] = worker
                    continue
                worker_done = waits.pop(task, None)
                if worker_done is None:
                    continue
                rc = int(task.result())
                worker_done.exits.append(rc)
                if rc == 0:
                    self.say(f"worker {worker_done.index} finished")
                    continue
                if rc == 2:
                    self.say(f"worker {worker_done.index} was misconfigured (exit 2); stopping all")
                    code = 2
                    if not self.stopping:
                        self.stop()
                    continue
                if self.stopping:
                    self.say(f"worker {worker_done.index} stopped (exit {rc})")
                    if rc not in (-signal.SIGTERM, -signal.SIGKILL, 130, 143):
                        code = code or 1
                    continue
                if not self.restart:
                    self.say(f"worker {worker_done.index} died (exit {rc})")
                    code = code or 1
                    continue
                ran = time.monotonic() - worker_done.started
                if ran > STABLE_S:
                    worker_done.backoff = 1.0
                delay = worker_done.backoff
                worker_done.backoff = min(MAX_BACKOFF_S, worker_done.backoff * 2)
                worker_done.restarts += 1
                self.say(f"worker {worker_done.index} died (exit {rc}); restarting it in {delay:g}s")
                pending_restarts[asyncio.create_task(asyncio.sleep(delay))] = worker_done
        return code
