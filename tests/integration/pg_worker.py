"""One worker process of the multi-worker test, run until SIGTERM (or killed).

    python -m tests.integration.pg_worker URL WORKER_ID LEASE_S

Each turn of a thread is two slices and one async, idempotent tool call through the
outbox (``lookup``), so a worker killed mid-run leaves leased threads and running
calls behind: the other workers must finish both once the leases expire.
"""

from __future__ import annotations

import asyncio
import signal
import sys

from dormant import Agent, Runtime, ScriptedModel, Settings, ToolContext, tool
from dormant.models import tool_round_trip


@tool(mode="async", idempotent=True)
async def lookup(q: str, ctx: ToolContext) -> str:
    """Look something up (async, idempotent: safe to run again after a crash)."""
    await asyncio.sleep(0.005)
    return f"found {q} for {ctx.call_id}"


def agent() -> Agent:
    """The agent every worker hosts."""
    model = ScriptedModel(tool_round_trip("lookup", {"q": "x"}, "ok"))
    return Agent(name="a", model=model, tools=[lookup])


async def main(url: str, worker_id: str, lease_s: float) -> None:
    settings = Settings.build(
        concurrency=32,
        tool_concurrency=32,
        poll_s=0.05,
        lease_s=lease_s,
        retry_base_s=0.05,
        retry_max_s=0.5,
        worker_id=worker_id,
        pg_pool_size=4,
    )
    async with Runtime(url, [agent()], settings=settings) as rt:
        # a dead worker's running calls are reconciled once their lease expires: keep
        # it short so the test does not wait for the default (slowest timeout + 30 s)
        rt.dispatcher.lease_s = lease_s
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, rt.stop)
        print("READY", flush=True)
        await rt.run()
    print(f"STOPPED slices={rt.stats.slices} tool_calls={rt.stats.tool_calls}", flush=True)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
