"""``dormant bench ui``: the dashboard's pages against a store of many threads.

A SQLite store in a temporary directory gets ``threads`` threads (one of them with
``messages`` messages); the app is served on loopback in this process; an operator
session then fetches each page ``rounds`` times (the overview, the threads listing
walked page by page, a filtered listing, the long thread's newest page, failures,
the samples feed), walks every page of the listing, then keeps ``dashboards`` sessions
live for ``live_s`` seconds as the page's script does. Figures: p50/p99 per page, this
process's RSS (server and clients together) before and after the browsing, and its CPU
share and RSS while the dashboards are live. Writes ``OUT/summary.json``.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from ..agent import Agent
from ..config import Settings
from ..models.base import ModelReply
from ..models.scripted import ScriptedModel
from ..records import NewInput
from ..runtime import Runtime

ADMIN = "bench-operator-token"


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` in milliseconds (rounded)."""
    ordered = sorted(values)
    return round(1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


async def _live(base: str, dashboards: int, seconds: float, proc: psutil.Process) -> dict[str, float]:
    """``dashboards`` sessions kept live for ``seconds`` as the page's script keeps them
    (the samples feed every 5 s, a thread's head every 2 s): CPU and RSS of the process."""
    stop = time.monotonic() + seconds
    requests = 0

    async def one() -> None:
        nonlocal requests
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            await c.post("/ui/login", data={"token": ADMIN})
            since = 0.0
            tick = 0
            while time.monotonic() < stop:
                if tick % 5 == 0:
                    body = (await c.get("/ui/api/samples", params={"since": since})).json()
                    if body["samples"]:
                        since = body["samples"][-1]["t"]
                    requests += 1
                if tick % 2 == 0:
                    await c.get("/ui/api/thread", params={"id": "th000000"})
                    requests += 1
                tick += 1
                await asyncio.sleep(1.0)

    cpu0 = sum(proc.cpu_times()[:2])
    rss0 = proc.memory_info().rss
    await asyncio.gather(*(one() for _ in range(dashboards)))
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return {
        "live_dashboards": dashboards,
        "live_seconds": seconds,
        "live_requests": requests,
        "live_cpu_share": round(cpu / seconds, 4),
        "live_rss_start_mb": round(rss0 / 2**20, 1),
        "live_rss_end_mb": round(proc.memory_info().rss / 2**20, 1),
    }


async def run(
    threads: int, messages: int, rounds: int, out: Path, *, dashboards: int = 20, live_s: float = 60.0
) -> dict[str, object]:
    """Fill a store, serve it, browse it; answer the figures (and write them to ``out``)."""
    import uvicorn

    from ..server import ServerConfig, create_app
    from ..server.main import listen, uvicorn_config

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/ui.db"
        agent = Agent(name="assistant", model=ScriptedModel(lambda r: ModelReply(text="ok")))
        rt = Runtime(url, [agent], settings=Settings.build(store=url))
        await rt.open()
        for n in range(threads):
            await rt.store.create_thread(f"th{n:06d}", "assistant")
        inputs = [
            NewInput(thread_id="th000000", kind="user", dedup_key=f"m{n}", content=f"message {n}")
            for n in range(messages // 2)
        ]
        for at in range(0, len(inputs), 200):
            await rt.admit(inputs[at : at + 200])
        await rt.run_until_idle(timeout=600)
        app = create_app(rt, ServerConfig(admin_token=ADMIN, ui_sample_s=1.0))
        sock = listen("127.0.0.1", 0)
        server = uvicorn.Server(uvicorn_config(app, app.state.server.config, graceful_s=2))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:  # noqa: ASYNC110 (uvicorn sets a flag, no event)
            await asyncio.sleep(0.01)
        base = f"http://127.0.0.1:{sock.getsockname()[1]}"
        proc = psutil.Process()
        rss_before = proc.memory_info().rss
        timings: dict[str, list[float]] = {}
        async with httpx.AsyncClient(base_url=base, timeout=60) as c:
            await c.post("/ui/login", data={"token": ADMIN})
            pages = {
                "overview": "/ui/overview",
                "threads": "/ui/threads",
                "threads_filtered": "/ui/threads?state=failed",
                "thread_newest": "/ui/thread?id=th000000",
                "failures": "/ui/failures",
                "samples": "/ui/api/samples",
            }
            for _ in range(rounds):
                for name, path in pages.items():
                    began = time.perf_counter()
                    r = await c.get(path)
                    timings.setdefault(name, []).append(time.perf_counter() - began)
                    assert r.status_code == 200, (name, r.status_code)
            walked, link = 0, "/ui/threads"
            nxt: str
            began = time.perf_counter()
            while link and walked < threads:
                r = await c.get(link)
                walked += r.text.count('<a href="/ui/thread?id=')
                nxt = (
                    r.text.split('" rel="next"')[0].rsplit('href="', 1)[-1] if 'rel="next"' in r.text else ""
                )
                link = nxt.replace("&amp;", "&")
            walk_s = time.perf_counter() - began
            live = await _live(base, dashboards, live_s, proc)
        rss_after = proc.memory_info().rss
        server.should_exit = True
        await task
        sock.close()
        await rt.close()
    figures: dict[str, object] = {
        "threads": threads,
        "messages_in_long_thread": messages,
        "rounds": rounds,
        **{f"{name}_p50_ms": pct(v, 0.5) for name, v in timings.items()},
        **{f"{name}_p99_ms": pct(v, 0.99) for name, v in timings.items()},
        "walk_all_threads_s": round(walk_s, 2),
        "threads_walked": walked,
        "mean_page_ms": round(1000 * statistics.fmean(x for v in timings.values() for x in v), 2),
        "rss_before_mb": round(rss_before / 2**20, 1),
        "rss_after_mb": round(rss_after / 2**20, 1),
        **live,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(figures, indent=1))
    return figures
