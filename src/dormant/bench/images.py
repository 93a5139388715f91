"""Images at scale: agents that each send 5 images of ~200 KB, half of all images one picture.

``agents`` threads on a fresh SQLite file, default configuration, one agent whose
model is the OpenAI-compatible adapter with the ``vision`` dialect against a
loopback server in another process (:mod:`.vision_server`): every slice with
images in its view reads their bytes from the blob store and sends them as data
URIs, as a vision model gets them. Threads are sent in waves of ``wave``: each
thread gets one user text with :data:`IMAGES_PER_AGENT` PNGs (random pixels,
:data:`IMAGE_SIDE` px, ~200 KB, incompressible), then the wave runs to idle,
``gc.collect()`` + ``malloc_trim(0)``, and VmRSS and the store's size are sampled.

**Half of all images are the same picture**: number the images sent in the run
``g = 5 * agent + k`` (``k`` = 0..4 within the agent's message); image ``g`` is
the one shared picture when ``g`` is even and a picture of its own (sent once in
the whole run) when ``g`` is odd (:func:`is_shared`). So of ``5 * N`` images,
``ceil(5N / 2)`` are copies of one picture and ``floor(5N / 2)`` are distinct,
and an agent's message carries the shared picture 3 times (even agents) or 2
times (odd ones). The unique bytes sent are one copy of the shared picture plus
every distinct one (:func:`unique_bytes`).

``mode="text"`` runs the same threads and texts without images (the baseline).
After the waves, ``probe`` threads spread over the run (:func:`probe_threads`)
each get one more text, one slice at a time: with images the view still holds
the thread's 5 images, so each probe slice reads them again; the figures are
that slice's latency (the runner's own measure) and the process CPU it took.

``python -m dormant.bench.images '<json of run_images arguments>'`` prints
``progress N TOTAL`` lines and ``result PATH``.
"""

from __future__ import annotations

import asyncio
import csv
import json
import random
import shutil
import struct
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from .. import tokens
from ..agent import Agent
from ..config import Settings
from ..models.openai import OpenAIChatModel
from ..parts import Image
from ..parts import budget as part_budget
from ..runtime import Runtime
from .scale import rss_bytes, trim
from .stats import percentile, slope_per_unit

MODES = ("text", "images")
IMAGES_PER_AGENT = 5
#: seed of the shared picture: no image number g (the seed of picture g) reaches it
SHARED_SEED = 2**40
#: side of each photo: 256 x 256 RGB of random pixels is ~197 KB as a PNG
IMAGE_SIDE = 256
USER_TEXT = "What is wrong with the parcel in these photos?"
PROBE_TEXT = "And the label, can you read it?"


# --------------------------------------------------------------------------- the arithmetic


def is_shared(agent: int, k: int, per_agent: int = IMAGES_PER_AGENT) -> bool:
    """Whether image ``k`` of ``agent``'s message is the one shared picture (global index even)."""
    return (agent * per_agent + k) % 2 == 0


def image_counts(agents: int, per_agent: int = IMAGES_PER_AGENT) -> tuple[int, int, int]:
    """``(images sent, copies of the shared picture, distinct pictures)`` of a run."""
    total = agents * per_agent
    shared = (total + 1) // 2
    distinct = (total - shared) + (1 if shared else 0)
    return total, shared, distinct


def unique_bytes(shared_size: int, own_sizes: list[int]) -> int:
    """Bytes of the distinct pictures sent: one copy of the shared one and each of its own."""
    return shared_size + sum(own_sizes)


def store_ratio(store_bytes: int, unique: int, baseline_bytes: int = 0) -> float:
    """``(store_bytes - baseline_bytes) / unique`` (0.0 when nothing unique was sent)."""
    return (store_bytes - baseline_bytes) / unique if unique > 0 else 0.0


def wave_slope(points: list[tuple[int, int]]) -> float:
    """RSS slope in KiB per agent over ``(agents, rss bytes)`` after each wave, wave 1
    skipped when there are more than two (as agent_scale measures it)."""
    pts = points[1:] if len(points) > 2 else points
    return slope_per_unit([(float(a), float(b)) for a, b in pts])


def probe_threads(agents: int, probe: int) -> list[int]:
    """``probe`` thread indexes spread evenly over ``0 .. agents - 1`` (all when fewer)."""
    if probe >= agents:
        return list(range(agents))
    return [i * agents // probe for i in range(probe)]


def extra_cost(images: dict[str, float], text: dict[str, float]) -> dict[str, float]:
    """Per figure both runs have, the images run minus the text-only one (and ``<key>_ratio``)."""
    out: dict[str, float] = {}
    for key, value in images.items():
        if key in text:
            out[key] = round(value - text[key], 4)
            out[f"{key}_ratio"] = round(value / text[key], 3) if text[key] > 0 else 0.0
    return out


# --------------------------------------------------------------------------- the pictures


def noise_png(seed: int, side: int = IMAGE_SIDE) -> bytes:
    """A PNG of ``side`` x ``side`` random RGB pixels (seeded), its IDAT stored
    uncompressed (written by hand: Pillow's encoder took ~10 ms a picture here);
    incompressible, 196,993 bytes at 256. Admission decodes it like any PNG."""
    row = side * 3
    pixels = random.Random(seed).randbytes(row * side)
    raw = b"".join(b"\x00" + pixels[at : at + row] for at in range(0, len(pixels), row))  # filter 0

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 0))
        + chunk(b"IEND", b"")
    )


def agent_images(agent: int, shared: bytes, side: int = IMAGE_SIDE) -> tuple[list[bytes], list[int]]:
    """The images of ``agent``'s message and the sizes of those that are its own."""
    images: list[bytes] = []
    own: list[int] = []
    for k in range(IMAGES_PER_AGENT):
        if is_shared(agent, k):
            images.append(shared)
        else:
            data = noise_png(agent * IMAGES_PER_AGENT + k, side)
            own.append(len(data))
            images.append(data)
    return images, own


# --------------------------------------------------------------------------- the run


@dataclass
class Wave:
    """One row of ``waves.csv``: after a wave, idle."""

    agents: int
    rss_bytes: int
    db_bytes: int
    wal_bytes: int
    elapsed_s: float


@dataclass
class ImagesResult:
    """The figures of one run (``summary.json``)."""

    mode: str
    agents: int
    wave: int
    images_sent: int = 0
    shared_copies: int = 0
    distinct_pictures: int = 0
    unique_bytes: int = 0
    db_bytes: int = 0
    wal_bytes: int = 0
    store_bytes: int = 0
    elapsed_s: float = 0.0
    admit_s: float = 0.0
    rss_start_bytes: int = 0
    rss_end_bytes: int = 0
    rss_peak_bytes: int = 0
    rss_slope_kib_per_agent: float = 0.0
    #: the part budget (dormant.parts.budget): most bytes held at once, requests that waited
    part_bytes_peak: int = 0
    part_budget_waits: int = 0
    slices: int = 0
    #: the waves' slices (up to ``concurrency`` at once): latency and CPU per slice
    slice_p50_ms: float = 0.0
    slice_p95_ms: float = 0.0
    cpu_ms_per_slice: float = 0.0
    #: the probes: one slice at a time on a thread whose view holds its images (or text)
    probes: int = 0
    probe_p50_ms: float = 0.0
    probe_p95_ms: float = 0.0
    probe_cpu_ms: float = 0.0
    probe_cpu_p95_ms: float = 0.0
    #: with images: the same probes on text-only threads of the same store, taken in turn
    #: with the image ones (``p50_ms``, ``p95_ms``, ``cpu_ms``, ``cpu_p95_ms``)
    text_probe: dict[str, float] = field(default_factory=dict)
    #: what the loopback server received: requests, data-URI images, bytes, the largest body
    server: dict[str, int] = field(default_factory=dict)
    #: what the store holds at the end, read from its ``blobs`` table: blobs and their bytes
    blobs: int = 0
    blob_bytes: int = 0
    concurrency: int = 0
    tokenizer_loaded: bool = False
    waves: list[Wave] = field(default_factory=list)


def _cpu() -> float:
    return time.process_time()


def _sizes(workdir: Path) -> tuple[int, int]:
    db, wal = workdir / "images.db", workdir / "images.db-wal"
    return (db.stat().st_size if db.exists() else 0, wal.stat().st_size if wal.exists() else 0)


def _blob_rows(db: Path) -> tuple[int, int]:
    """Complete blobs in the SQLite file ``db`` and the sum of their sizes."""
    import apsw

    conn = apsw.Connection(str(db))
    try:
        row = conn.execute("SELECT count(*), coalesce(sum(size), 0) FROM blobs WHERE size >= 0").fetchone()
    finally:
        conn.close()
    return (int(row[0]), int(row[1])) if row else (0, 0)


def start_server() -> tuple[subprocess.Popen[str], str]:
    """The loopback vision server in a process of its own, and its base URL."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dormant.bench.vision_server"], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    if line[:1] != ["port"]:
        proc.kill()
        raise RuntimeError("the loopback vision server did not start")
    return proc, f"http://127.0.0.1:{line[1]}/v1"


def make_agent(base_url: str) -> Agent:
    """The agent: the OpenAI-compatible adapter, ``vision`` dialect, on the loopback server."""
    model = OpenAIChatModel(
        model="loopback-vision", base_url=base_url, api_key="bench", dialect="vision", max_retries=0
    )
    return Agent(name="viewer", model=model, system_prompt="You inspect parcels in photos.")


async def run_images(
    *,
    mode: str,
    agents: int,
    out: Path,
    wave: int = 1000,
    probe: int = 200,
    side: int = IMAGE_SIDE,
    progress: Callable[[int, int], None] | None = None,
) -> ImagesResult:
    """One run; writes ``out/waves.csv`` and ``out/summary.json`` and returns the figures."""
    if mode not in MODES:
        raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
    if agents < 1 or wave < 1 or probe < 0:
        raise ValueError("agents and wave are positive, probe not negative")
    out.mkdir(parents=True, exist_ok=True)
    workdir = out / "data"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir()
    url = f"sqlite:///{workdir / 'images.db'}"
    settings = Settings.build(store=url)
    server, base_url = start_server()
    result = ImagesResult(mode=mode, agents=agents, wave=wave, concurrency=settings.concurrency)
    shared = noise_png(SHARED_SEED, side) if mode == "images" else b""
    own_sizes: list[int] = []
    trim()
    result.rss_start_bytes = rss_bytes()
    slice_cpu = 0.0
    started = time.perf_counter()
    try:
        async with Runtime(url, [make_agent(base_url)], settings=settings) as rt:
            rt.stats.slice_latency.reset()
            for first in range(0, agents, wave):
                ids = range(first, min(first + wave, agents))
                t0 = time.perf_counter()
                for n in ids:
                    parts: list[Image] = []
                    if mode == "images":
                        images, own = agent_images(n, shared, side)
                        own_sizes.extend(own)
                        parts = [Image(b, name=f"photo-{n}-{k}.png") for k, b in enumerate(images)]
                        del images
                    await rt.send(f"agent-{n}", USER_TEXT, dedup_key="photos", parts=parts)
                    del parts
                result.admit_s += time.perf_counter() - t0
                c0 = _cpu()
                await rt.run_until_idle()
                slice_cpu += _cpu() - c0
                trim()
                db, wal = _sizes(workdir)
                result.waves.append(
                    Wave(ids[-1] + 1, rss_bytes(), db, wal, round(time.perf_counter() - started, 2))
                )
                if progress:
                    progress(ids[-1] + 1, agents + min(probe, agents))
            result.elapsed_s = round(time.perf_counter() - started, 2)
            result.slices = rt.stats.slices
            lat = rt.stats.slice_latency
            result.slice_p50_ms = round(lat.percentile(50) * 1000, 3)
            result.slice_p95_ms = round(lat.percentile(95) * 1000, 3)
            result.cpu_ms_per_slice = round(slice_cpu * 1000 / max(1, result.slices), 3)
            await _probe(rt, result, probe_threads(agents, probe), progress)
            result.tokenizer_loaded = tokens.encoding.cache_info().currsize > 0
        async with httpx.AsyncClient() as c:
            result.server = (await c.get(f"{base_url}/stats")).json()
    finally:
        server.kill()
        server.wait()
    result.blobs, result.blob_bytes = _blob_rows(workdir / "images.db")
    total, copies, distinct = image_counts(agents) if mode == "images" else (0, 0, 0)
    result.images_sent, result.shared_copies, result.distinct_pictures = total, copies, distinct
    result.unique_bytes = unique_bytes(len(shared), own_sizes) if mode == "images" else 0
    result.db_bytes, result.wal_bytes = result.waves[-1].db_bytes, result.waves[-1].wal_bytes
    result.store_bytes = result.db_bytes + result.wal_bytes
    result.admit_s = round(result.admit_s, 2)
    result.rss_end_bytes = result.waves[-1].rss_bytes
    result.rss_peak_bytes = rss_bytes("VmHWM")
    held = part_budget.SHARED.stats()
    result.part_bytes_peak, result.part_budget_waits = held.peak, held.waits
    result.rss_slope_kib_per_agent = round(wave_slope([(w.agents, w.rss_bytes) for w in result.waves]), 4)
    write_outputs(result, out)
    shutil.rmtree(workdir, ignore_errors=True)
    return result


def _probe_figures(latencies: list[float], cpus: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(percentile(latencies, 50) * 1000, 3),
        "p95_ms": round(percentile(latencies, 95) * 1000, 3),
        "cpu_ms": round(percentile(cpus, 50) * 1000, 3),
        "cpu_p95_ms": round(percentile(cpus, 95) * 1000, 3),
    }


async def _probe(
    rt: Runtime, result: ImagesResult, threads: list[int], progress: Callable[[int, int], None] | None
) -> None:
    """One more text to each of ``threads``, one slice at a time: latency and CPU per slice.

    With images, as many text-only threads are written first and probed in turn with the
    image threads (image, text, image, ...), so both see the same machine load."""
    paired = result.mode == "images"
    if paired:
        for i in range(len(threads)):
            await rt.send(f"text-{i}", USER_TEXT, dedup_key="photos")
        await rt.run_until_idle()
    order = [(f"agent-{n}", "images" if paired else "text") for n in threads]
    if paired:
        texts = [(f"text-{i}", "text") for i in range(len(threads))]
        order = [x for pair in zip(order, texts, strict=True) for x in pair]
    seen: dict[str, tuple[list[float], list[float]]] = {"images": ([], []), "text": ([], [])}
    latest: list[float] = []
    rt.stats.slice_latency.sinks.append(latest.append)
    try:
        for done, (thread, kind) in enumerate(order, 1):
            await rt.send(thread, PROBE_TEXT, dedup_key="probe")
            latest.clear()
            c0 = _cpu()
            await rt.run_until_idle()
            seen[kind][1].append(_cpu() - c0)
            seen[kind][0].extend(latest)
            if progress and (not paired or done % 2 == 0):
                progress(result.agents + (done + 1) // (2 if paired else 1), result.agents + len(threads))
    finally:
        rt.stats.slice_latency.sinks.remove(latest.append)
    mine = _probe_figures(*seen["images" if paired else "text"])
    result.probes = len(threads)
    result.probe_p50_ms, result.probe_p95_ms = mine["p50_ms"], mine["p95_ms"]
    result.probe_cpu_ms, result.probe_cpu_p95_ms = mine["cpu_ms"], mine["cpu_p95_ms"]
    if paired:
        result.text_probe = _probe_figures(*seen["text"])


#: the figures of a probe, as :attr:`ImagesResult.text_probe` names them
PAIRED = ("p50_ms", "p95_ms", "cpu_ms", "cpu_p95_ms")


def write_outputs(result: ImagesResult, out: Path) -> None:
    """``waves.csv`` and ``summary.json`` of one run in ``out``."""
    with open(out / "waves.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["agents", "rss_bytes", "db_bytes", "wal_bytes", "elapsed_s"])
        for w in result.waves:
            writer.writerow([w.agents, w.rss_bytes, w.db_bytes, w.wal_bytes, w.elapsed_s])
    summary = asdict(result)
    summary["waves"] = [[w.agents, w.rss_bytes] for w in result.waves]
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


def compare(text: dict[str, Any], images: dict[str, Any], scale_slope: float | None) -> dict[str, Any]:
    """The figures the command reports, from the two runs' summaries (and agent_scale's slope)."""
    keys = (
        "slice_p50_ms",
        "slice_p95_ms",
        "cpu_ms_per_slice",
        "probe_p50_ms",
        "probe_p95_ms",
        "probe_cpu_ms",
    )
    unique = int(images["unique_bytes"])
    return {
        "agents": images["agents"],
        "images_sent": images["images_sent"],
        "shared_copies": images["shared_copies"],
        "distinct_pictures": images["distinct_pictures"],
        "unique_bytes": unique,
        "store_bytes": images["store_bytes"],
        "store_over_unique": round(store_ratio(int(images["store_bytes"]), unique), 4),
        "store_minus_text_over_unique": round(
            store_ratio(int(images["store_bytes"]), unique, int(text["store_bytes"])), 4
        ),
        "rss_slope_kib_per_agent": {
            "images": images["rss_slope_kib_per_agent"],
            "text": text["rss_slope_kib_per_agent"],
            "agent_scale": scale_slope,
        },
        "rss_end_bytes": {"images": images["rss_end_bytes"], "text": text["rss_end_bytes"]},
        "rss_peak_bytes": {"images": images["rss_peak_bytes"], "text": text["rss_peak_bytes"]},
        "part_bytes_peak": images.get("part_bytes_peak", 0),
        "part_budget_waits": images.get("part_budget_waits", 0),
        "extra_per_slice": extra_cost({k: float(images[k]) for k in keys}, {k: float(text[k]) for k in keys}),
        "extra_per_probe_slice_paired": extra_cost(
            {k: float(images[f"probe_{k}"]) for k in PAIRED}, dict(images.get("text_probe") or {})
        ),
    }


def main(argv: list[str] | None = None) -> None:
    """Subprocess entry: ``python -m dormant.bench.images '<json of run_images arguments>'``."""
    args = json.loads((argv if argv is not None else sys.argv[1:])[0])
    out = Path(args.pop("out"))
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5 or done == total:
            last[0] = now
            print(f"progress {done} {total}", flush=True)

    asyncio.run(run_images(out=out, progress=progress, **args))
    print(f"result {out / 'summary.json'}", flush=True)


if __name__ == "__main__":
    main()
