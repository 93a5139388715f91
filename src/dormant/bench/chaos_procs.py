"""The worker processes of ``dormant bench chaos``: starting one, and the standby worker.

Every worker is ``python -m dormant.bench.chaos_worker '<json>'`` with the store URL in
the environment (:data:`~dormant.bench.chaos_worker.URL_ENV`, never argv: a PostgreSQL
URL holds a password) and its stderr appended to ``OUT/worker.log``.

The standby is a worker that admits nothing and runs until told to stop: the other
workers of a deployment, alive while one dies, so the harness can measure how fast the
store lets them take the dead worker's threads over. A poison pill may end it (exit
:data:`~dormant.bench.chaos_worker.POISON_EXIT`): :meth:`Standby.poll` starts a new one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .chaos_worker import POISON_EXIT, URL_ENV

#: Longest a standby may take to finish its running work after SIGTERM.
STOP_S = 30.0


def start_worker(out: Path, url: str, payload: dict[str, Any]) -> subprocess.Popen[str]:
    """Start one chaos worker process (stdout piped, stderr to ``out/worker.log``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DORMANT_")}
    env[URL_ENV] = url
    with open(out / "worker.log", "a") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "dormant.bench.chaos_worker", json.dumps(payload)],
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            text=True,
        )


class Standby:
    """A standby worker kept alive (restarted after each poison death) until :meth:`stop`."""

    def __init__(self, out: Path, url: str, payload: dict[str, Any], on_lost: Callable[[], None]) -> None:
        self.out = out
        self.url = url
        self.payload = {**payload, "role": "standby"}
        self.on_lost = on_lost
        self.proc: subprocess.Popen[str] | None = None
        self.deaths = 0  # ended by a poison pill
        self.problems: list[str] = []
        self._offset = 0

    def start(self) -> None:
        """Start a standby process (it is :meth:`ready` once it has opened the store)."""
        acks = self.out / "acks.log"
        self._offset = acks.stat().st_size if acks.exists() else 0
        self.proc = start_worker(self.out, self.url, self.payload)

    def ready(self) -> bool:
        """Whether the standby is alive and has opened the store (its line in the acks log)."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        acks = self.out / "acks.log"
        if not acks.exists():
            return False
        with open(acks, "rb") as f:
            f.seek(self._offset)
            return f"standby {self.proc.pid}\n".encode() in f.read(256 * 1024)

    def wait_ready(self, timeout: float) -> bool:
        """Wait until :meth:`ready` (restarting after poison deaths); False on timeout."""
        ends = time.monotonic() + timeout
        while time.monotonic() < ends:
            self.poll()
            if self.ready():
                return True
            time.sleep(0.01)
        return False

    def poll(self) -> None:
        """Start a new standby if a poison pill ended this one; note any other death."""
        if self.proc is None or self.proc.poll() is None:
            return
        code = self.proc.returncode
        self.proc.communicate()
        self.on_lost()
        if code == POISON_EXIT:
            self.deaths += 1
            self.start()
        else:
            self.problems.append(f"the standby worker ended by itself (exit {code})")
            self.proc = None

    def stop(self) -> None:
        """SIGTERM the standby and wait for it to finish its running work (kill it after
        :data:`STOP_S`: a problem)."""
        proc = self.proc
        if proc is None:
            return
        self.on_lost()
        opened = self.ready()
        self.proc = None  # before that, SIGTERM ends it at once (no handler yet): fine
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.communicate(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.problems.append(f"the standby did not stop within {STOP_S:g}s of SIGTERM")
                return
        if proc.returncode not in (0, POISON_EXIT) and (opened or proc.returncode != -signal.SIGTERM):
            self.problems.append(f"the standby ended with exit {proc.returncode} when stopped")

    def kill(self) -> None:
        """SIGKILL the standby if it runs (cleaning up after an interrupted run)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
