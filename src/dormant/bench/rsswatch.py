"""An RSS watcher process: samples another process's RSS every ``interval`` seconds.

``python -m dormant.bench.rsswatch PID OUT [INTERVAL]`` samples until the watched
process exits or this one gets SIGTERM/SIGINT, then writes ``OUT`` (JSON):
``max_rss_bytes``, ``samples``, ``interval_s`` and ``max_gap_s`` (the longest time
between two samples, so a reader can tell how fine the sampling really was).
It runs in its own process so that it keeps sampling while the watched one is busy.
:func:`start` and :func:`stop` run one over the calling process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

import psutil


def watch(pid: int, out: Path, interval: float = 0.01) -> dict[str, float]:
    """Sample ``pid``'s RSS until it exits or a signal arrives; write and return the figures."""
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    proc = psutil.Process(pid)
    max_rss = samples = 0
    max_gap = 0.0
    _write(out, {"max_rss_bytes": 0, "samples": 0, "interval_s": interval, "max_gap_s": 0.0})  # ready
    last = time.perf_counter()
    while not stopping:
        try:
            rss = proc.memory_info().rss
        except (psutil.NoSuchProcess, psutil.ZombieProcess):
            break
        now = time.perf_counter()
        max_gap = max(max_gap, now - last) if samples else 0.0
        last = now
        samples += 1
        max_rss = max(max_rss, rss)
        time.sleep(max(0.0, interval - (time.perf_counter() - now)))
    result = {"max_rss_bytes": max_rss, "samples": samples, "interval_s": interval, "max_gap_s": max_gap}
    _write(out, result)
    return result


def _write(out: Path, result: dict[str, float]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(out)


def start(out: Path, interval: float = 0.01, timeout: float = 30.0) -> subprocess.Popen[bytes]:
    """A watcher process sampling this process's RSS into ``out`` every ``interval`` s,
    once it has begun to sample. Raises :class:`RuntimeError` if it does not within ``timeout``."""
    out.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "dormant.bench.rsswatch", str(os.getpid()), str(out), str(interval)]
    watcher = subprocess.Popen(cmd)
    # wait until it samples (it writes ``out`` first): a run shorter than its start-up is
    # then still watched, and a stop never comes before its signal handlers are in place
    deadline = time.monotonic() + timeout
    while not out.exists():
        if watcher.poll() is not None or time.monotonic() > deadline:
            watcher.kill()
            raise RuntimeError(f"the RSS watcher did not start (exit {watcher.poll()})")
        time.sleep(0.005)
    return watcher


def stop(watcher: subprocess.Popen[bytes], out: Path, timeout: float = 10.0) -> dict[str, float]:
    """Stop a watcher from :func:`start` and return its figures (``max_rss_bytes``, ...)."""
    watcher.terminate()
    watcher.wait(timeout)
    figures: dict[str, float] = json.loads(out.read_text())
    return figures


if __name__ == "__main__":
    watch(int(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 0.01)
