"""``dormant bench mcp``: one MCP call through the outbox against one plain async tool.

The same workload twice, on a fresh SQLite store each: ``calls`` threads, each making one
call of an ``echo`` tool — a Python async tool, then the same tool on a stdio MCP server
(:mod:`dormant.bench.mcp_echo`, the official SDK's server) — one call at a time
(``c1``: the latency of one call) and 64 at once (``c64``). Reported: the dispatcher's
latency of one call (p50/p99), the wall time of the whole run, and CPU per call (the
worker's, and the MCP servers' processes). Then a worker with ``servers`` stdio servers
attached: the time to list their tools at start, and RSS (the worker's, and with its
servers) idle and under load.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import psutil

from ..agent import Agent
from ..config import Settings
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import ToolCall
from ..runtime import Runtime
from ..tools.mcp import McpServer
from ..tools.spec import tool


@tool(mode="async", idempotent=True)
async def echo(text: str) -> str:
    """Answer ``text``."""
    return text


def _script(names: list[str]) -> ScriptedModel:
    def script(request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "user":
            index = int(request.thread_id.rsplit("-", 1)[1])
            call = ToolCall(id="c", name=names[index % len(names)], arguments=json.dumps({"text": "ping"}))
            return ModelReply(text="", tool_calls=(call,))
        return ModelReply(text="done")

    return ScriptedModel(script)


def _server(name: str) -> McpServer:
    return McpServer(name=name, command=sys.executable, args=("-m", "dormant.bench.mcp_echo"))


class _Sampler:
    """The worker's and its servers' CPU and RSS, sampled every 50 ms while the run goes
    (the servers stop when the run does: their last sample counts)."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.child_cpu: dict[int, float] = {}
        self.peak_total = 0
        self.peak_own = 0

    def sample(self) -> None:
        own = self.me.memory_info().rss
        total = own
        for child in self.me.children(recursive=True):
            try:
                times, rss = child.cpu_times(), child.memory_info().rss
            except psutil.Error:
                continue
            self.child_cpu[child.pid] = times.user + times.system
            total += rss
        self.peak_own, self.peak_total = max(self.peak_own, own), max(self.peak_total, total)

    def cpu(self) -> float:
        times = self.me.cpu_times()
        return times.user + times.system

    def children_cpu(self) -> float:
        return sum(self.child_cpu.values())


async def _workload(agent: Agent, calls: int, db: Path, *, concurrency: int) -> dict[str, float]:
    settings = Settings.build(poll_s=0.005, tool_concurrency=concurrency, worker_id=f"bench-{db.stem}")
    sampler = _Sampler()
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings) as rt:
        listed = time.perf_counter()
        await rt.mcp.start()
        listed = time.perf_counter() - listed
        for link in rt.mcp.links.values():  # started and warm: the calls measure calls
            await link.call("echo", {"text": "warm"}, idle_timeout=30)
        sampler.sample()
        idle_own, idle_total = sampler.peak_own, sampler.peak_total
        for n in range(calls):
            await rt.send(f"t-{n}", "go", key="k")
        cpu_before, children_before = sampler.cpu(), sampler.children_cpu()
        stop = asyncio.Event()

        async def sampling() -> None:
            while not stop.is_set():
                sampler.sample()
                await asyncio.sleep(0.05)

        watcher = asyncio.create_task(sampling())
        started = time.perf_counter()
        await rt.run_until_idle(timeout=600)
        wall = time.perf_counter() - started
        stop.set()
        await watcher
        cpu = sampler.cpu() - cpu_before
        children = sampler.children_cpu() - children_before
        latency = rt.stats.tool_latency
        done = max(rt.stats.tool_calls, 1)
    return {
        "calls": float(rt.stats.tool_calls),
        "call_p50_ms": latency.percentile(50) * 1000,
        "call_p99_ms": latency.percentile(99) * 1000,
        "wall_s": wall,
        "worker_cpu_ms_per_call": cpu / done * 1000,
        "server_cpu_ms_per_call": children / done * 1000,
        "list_tools_at_start_s": listed,
        "rss_idle_worker_mib": idle_own / 2**20,
        "rss_idle_with_servers_mib": idle_total / 2**20,
        "rss_load_worker_mib": sampler.peak_own / 2**20,
        "rss_load_with_servers_mib": sampler.peak_total / 2**20,
    }


async def run_mcp_bench(calls: int, servers: int, out: Path) -> dict[str, dict[str, float]]:
    """Run the three workloads; write and return ``out/summary.json``."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dormant-bench-mcp-") as tmp:
        work = Path(tmp)
        plain = Agent(name="a", model=_script(["echo"]), tools=[echo], builtins=False)
        one = Agent(name="a", model=_script(["echo__echo"]), mcp=[_server("echo")], builtins=False)
        names = [f"e{i}" for i in range(servers)]
        many = Agent(
            name="a",
            model=_script([f"{n}__echo" for n in names]),
            mcp=[_server(n) for n in names],
            builtins=False,
        )
        summary = {
            "plain_c1": await _workload(plain, calls, work / "plain1.db", concurrency=1),
            "mcp_c1": await _workload(one, calls, work / "one1.db", concurrency=1),
            "plain_c64": await _workload(plain, calls, work / "plain64.db", concurrency=64),
            "mcp_c64": await _workload(one, calls, work / "one64.db", concurrency=64),
            f"mcp_{servers}_servers_c64": await _workload(many, calls, work / "many.db", concurrency=64),
        }
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
