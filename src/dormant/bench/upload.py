"""A large file uploaded through the HTTP API: the server's peak RSS while it takes it.

``dormant serve`` runs in a subprocess (SQLite store in a temporary directory, the
default echo agent, part limits raised to fit the file). A warm-up upload of 1 MiB
loads the code paths; then, with :mod:`.rsswatch` sampling the server's RSS every
``interval`` seconds from a process of its own, one ``multipart/form-data`` input
carrying a file of ``mib`` MiB of random bytes (an opaque file: nothing to decode)
is streamed in 64 KiB pieces, and the benchmark waits for the agent's reply. The
figure is the peak RSS over the whole upload and reply minus the RSS just before
it (the target: under 10 MB, i.e. the file is never held in the server's RAM).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from .serve import _key, _wait_healthy, free_port

BOUNDARY = "dormantbenchupload"
PIECE = 64 * 1024
#: The server's RSS may grow by less than this while it takes the file (bytes).
TARGET_GROWTH_BYTES = 10 * 1000 * 1000


@dataclass
class UploadFigures:
    """What one run measured."""

    file_bytes: int
    status: int = 0
    upload_s: float = 0.0
    mb_per_s: float = 0.0
    reply_s: float = 0.0
    stored_bytes: int = 0
    rss_before_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_growth_bytes: int = 0
    rss_after_bytes: int = 0
    samples: int = 0
    interval_s: float = 0.0
    max_gap_s: float = 0.0
    target_growth_bytes: int = TARGET_GROWTH_BYTES
    passed: bool = False


async def until_catching(pid: int, timeout: float = 30.0) -> None:
    """Wait until process ``pid`` catches SIGTERM (the watcher set its handler up: a
    SIGTERM before that would end it without its report)."""
    async with asyncio.timeout(timeout):
        while True:
            if catches_sigterm(pid):
                return
            await asyncio.sleep(0.02)


def catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in /proc)."""
    bit = 1 << (signal.SIGTERM - 1)
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & bit)
    return False


def growth(before: int, peak: int) -> int:
    """How far the peak RSS went above the RSS before (0 when it never did)."""
    return max(0, peak - before)


def form_head(name: str) -> bytes:
    """The multipart body up to the file's bytes: a ``content`` field, then the file's headers."""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="content"\r\n\r\nthe archive\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()


async def body(size: int, name: str) -> AsyncIterator[bytes]:
    """A multipart body carrying ``size`` random bytes as file ``name``, in 64 KiB pieces."""
    yield form_head(name)
    left = size
    while left:
        piece = os.urandom(min(PIECE, left))
        left -= len(piece)
        yield piece
    yield f"\r\n--{BOUNDARY}--\r\n".encode()


async def _upload(c: httpx.AsyncClient, thread: str, size: int) -> httpx.Response:
    headers = {"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    return await c.post(f"/v1/threads/{thread}/inputs", content=body(size, f"{thread}.bin"), headers=headers)


async def _replied(c: httpx.AsyncClient, thread: str, timeout: float) -> list[dict[str, object]]:
    """The thread's messages once the agent replied (user message and reply)."""
    async with asyncio.timeout(timeout):
        while True:
            r = await c.get(f"/v1/threads/{thread}/messages")
            items: list[dict[str, object]] = r.json().get("items", []) if r.status_code == 200 else []
            if len(items) >= 2:
                return items
            await asyncio.sleep(0.05)


async def run(out: Path, mib: int = 50, interval: float = 0.005) -> UploadFigures:
    """One run; writes ``out/summary.json`` and returns the figures."""
    out.mkdir(parents=True, exist_ok=True)
    size = mib * 1024 * 1024
    fig = UploadFigures(file_bytes=size)
    limit = str(size + 1024 * 1024)
    env = {**os.environ, "DORMANT_MAX_PART_BYTES": limit, "DORMANT_MAX_INPUT_PARTS_BYTES": limit}
    env["DORMANT_MAX_THREAD_DAY_PART_BYTES"] = "0"
    with tempfile.TemporaryDirectory(prefix="dormant-bench-upload-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "dormant.cli", "serve", "--store", f"sqlite:///{tmp}/upload.db"]
        cmd += ["--port", str(port), "--bootstrap-tenant", "bench"]
        log = (out / "server.log").open("wb")
        proc = await asyncio.create_subprocess_exec(*cmd, stdout=asyncio.subprocess.PIPE, stderr=log, env=env)
        watcher: asyncio.subprocess.Process | None = None
        try:
            key = await _key(proc, 60)
            await _wait_healthy(url, proc, 60)
            headers = {"Authorization": f"Bearer {key}"}
            timeout = httpx.Timeout(120.0)
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout) as c:
                warm = await _upload(c, "warm", 1024 * 1024)
                warm.raise_for_status()
                await _replied(c, "warm", 60)
                await asyncio.sleep(1.0)
                server = psutil.Process(proc.pid)
                fig.rss_before_bytes = server.memory_info().rss
                report = out / "rss.json"
                report.unlink(missing_ok=True)
                watcher = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "dormant.bench.rsswatch", str(proc.pid), str(report), str(interval)
                )
                await until_catching(watcher.pid)
                await asyncio.sleep(0.1)  # sampling
                started = time.perf_counter()
                r = await _upload(c, "big", size)
                fig.upload_s = round(time.perf_counter() - started, 3)
                fig.status = r.status_code
                if r.status_code == 202:
                    items = await _replied(c, "big", 120)
                    fig.reply_s = round(time.perf_counter() - started, 3)
                    parts: list[dict[str, Any]] = list(items[0].get("parts") or [])  # type: ignore[call-overload]
                    fig.stored_bytes = sum(int(p.get("size", 0)) for p in parts)
                await asyncio.sleep(0.5)
                watcher.send_signal(signal.SIGTERM)
                await watcher.wait()
                watched = json.loads(report.read_text())
                fig.rss_after_bytes = server.memory_info().rss
        finally:
            if watcher is not None and watcher.returncode is None:
                watcher.kill()
                await watcher.wait()
            if proc.returncode is None:
                proc.terminate()
                try:
                    await asyncio.wait_for(proc.wait(), 15)
                except TimeoutError:
                    proc.kill()
                    await proc.wait()
            log.close()
    fig.rss_peak_bytes = max(int(watched["max_rss_bytes"]), fig.rss_before_bytes)
    fig.samples, fig.interval_s = int(watched["samples"]), float(watched["interval_s"])
    fig.max_gap_s = round(float(watched["max_gap_s"]), 4)
    fig.rss_growth_bytes = growth(fig.rss_before_bytes, fig.rss_peak_bytes)
    fig.mb_per_s = round(size / 1e6 / fig.upload_s, 1) if fig.upload_s else 0.0
    fig.passed = fig.status == 202 and fig.stored_bytes == size and fig.rss_growth_bytes < TARGET_GROWTH_BYTES
    (out / "summary.json").write_text(json.dumps(asdict(fig), indent=2) + "\n")
    return fig


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        print(json.dumps(asdict(asyncio.run(run(Path(sys.argv[1]), int(sys.argv[2]))))))
