"""Worker processes for the multi-process fault tests, one per subcommand.

    python -m tests.faults.worker redeliver DB DIR START_AT   # admit everything 3x, and run
    python -m tests.faults.worker serve DB DIR NAME           # run slices, logging each model call
    python -m tests.faults.worker hang DB DIR                 # start tool calls that never end
    python -m tests.faults.worker open-race DB DIR START_AT   # open new files at set instants

Everything a test checks afterwards is appended to files in DIR with single
``os.write`` calls, so a SIGKILL loses nothing already written.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from dormant import Agent, ModelReply, ModelRequest, NewInput, Runtime, ScriptedModel, Settings, ToolCall
from dormant.models.base import ModelEvent, TextDelta
from dormant.tools.spec import ToolContext, tool

REDELIVER_THREADS = 12
REDELIVER_INPUTS = 5
COPIES = 3


def append(path: Path, line: str) -> None:
    """Append one line to ``path`` in one write."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def settings(name: str, **overrides: object) -> Settings:
    """Fast settings for a test worker called ``name``."""
    values: dict[str, object] = {
        "concurrency": 8,
        "tool_concurrency": 8,
        "poll_s": 0.01,
        "lease_s": 1.0,
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        "worker_id": f"{name}-{os.getpid()}",
    }
    values.update(overrides)
    return Settings.build(**values)


def redeliver_items() -> list[NewInput]:
    """The inputs every sender delivers (stable keys: the same in every process)."""
    return [
        NewInput(thread_id=f"r{t}", kind="user", dedup_key=f"msg-{i}", content=f"message {i}", agent="a")
        for t in range(REDELIVER_THREADS)
        for i in range(REDELIVER_INPUTS)
    ]


async def redeliver(db: str, work: Path, start_at: float) -> None:
    """Deliver every input COPIES times from several tasks at once, while slices run.

    The model answers each slice with one ``record`` call naming the user texts it
    saw since its last answer; ``record`` (not idempotent) logs each of them as an
    effect: an input handled twice would show twice.
    """

    @tool(mode="async")
    async def record(texts: list[str], ctx: ToolContext) -> str:
        """Record that these texts were handled."""
        for text in texts:
            append(work / "effects.log", f"{ctx.thread_id} {text.replace(' ', '_')}")
        return "recorded"

    def script(request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "tool":
            return ModelReply(text="ok")
        texts: list[str] = []
        for message in reversed(request.messages):
            if message.role != "user":
                break
            texts.insert(0, message.content)
        call = ToolCall(id="rec", name="record", arguments=json.dumps({"texts": texts}))
        return ModelReply(text="", tool_calls=(call,))

    agent = Agent(name="a", model=ScriptedModel(script), tools=[record])
    items = redeliver_items()
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings("redeliver")) as rt:
        runner = asyncio.create_task(rt.run())
        await asyncio.sleep(max(0.0, start_at - time.time()))  # both processes start together
        senders = []
        for copy in range(COPIES):
            order = items if copy % 2 == 0 else list(reversed(items))
            senders.append(rt.admit(order))
            senders.extend(rt.admit([item]) for item in order[copy::COPIES])
        results = await asyncio.gather(*senders)
        lines = [
            f"{a.thread_id} {a.dedup_key} {a.input_id} {int(a.duplicate)}" for batch in results for a in batch
        ]
        append(work / f"admissions-{os.getpid()}.log", "\n".join(lines))
        rt.stop()
        await runner
        await rt.run_until_idle(timeout=60)
    print("DONE", flush=True)


class SlowLoggingModel:
    """Takes ``delay`` seconds per call and logs ``enter``/``exit`` lines with the time."""

    context_window = 10_000
    max_output_tokens = 1_000
    encoding = "o200k_base"

    def __init__(self, log: Path, name: str, delay: float) -> None:
        self.log = log
        self.name = name
        self.delay = delay

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelEvent]:
        """Log, wait, answer with the newest user text."""
        append(self.log, f"enter {self.name} {request.thread_id} {time.time():.6f}")
        await asyncio.sleep(self.delay)
        append(self.log, f"exit {self.name} {request.thread_id} {time.time():.6f}")
        yield TextDelta(text=f"seen {request.messages[-1].content}")


async def serve(db: str, work: Path, name: str) -> None:
    """Run slices on ``db`` until stopped by ``DIR/stop`` (or killed)."""
    model = SlowLoggingModel(work / "calls.log", name, delay=0.05)
    agent = Agent(name="a", model=model)
    # long leases: a live worker on a loaded machine never loses one between renewals, and a
    # dead worker's threads can come back only by proof of its death (its lock file), not expiry
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings(name, lease_s=30.0)) as rt:
        runner = asyncio.create_task(rt.run())
        append(work / "ready.log", name)
        while not (work / "stop").exists():  # noqa: ASYNC110 - a file is the signal here
            await asyncio.sleep(0.02)
        rt.stop()
        await runner
    print("DONE", flush=True)


async def hang(db: str, work: Path) -> None:
    """Start one ``transfer`` (not idempotent) and one ``sync`` (idempotent) call that never end.

    Each logs its effect with its idempotency key (the call id) before hanging; the
    test kills this process then, and finishes the work in another runtime.
    """

    @tool(mode="async")
    async def transfer(amount: int, ctx: ToolContext) -> str:
        """Move money (not idempotent)."""
        append(work / "effects.log", f"transfer {ctx.call_id}")
        await asyncio.sleep(3600)
        return "moved"

    @tool(mode="async", idempotent=True)
    async def sync(ctx: ToolContext) -> str:
        """Synchronise (idempotent: keyed by the call id)."""
        append(work / "effects.log", f"sync {ctx.call_id}")
        await asyncio.sleep(3600)
        return "synced"

    def script(request: ModelRequest) -> ModelReply:
        if request.messages[-1].role == "user":
            name = "transfer" if request.thread_id == "money" else "sync"
            arguments = '{"amount": 5}' if name == "transfer" else "{}"
            return ModelReply(text="", tool_calls=(ToolCall(id="c", name=name, arguments=arguments),))
        return ModelReply(text=f"after: {request.messages[-1].content}")

    agent = Agent(name="a", model=ScriptedModel(script), tools=[transfer, sync])
    async with Runtime(f"sqlite:///{db}", [agent], settings=settings("hang")) as rt:
        rt.dispatcher.lease_s = 0.5  # so the next worker reconciles soon after the kill
        await rt.send("money", "pay", key="k")
        await rt.send("mirror", "sync", key="k")
        await rt.run()


OPEN_ROUNDS = 15


async def open_race(work: Path, start_at: float) -> None:
    """Open (creating it) ``DIR/raceN.db`` at instant ``START_AT + N * 0.15``, for each round
    N, as the other racers do; log ``ok`` or the error of each round."""
    from dormant.store.sqlite import SQLiteStore

    for n in range(OPEN_ROUNDS):
        await asyncio.sleep(max(0.0, start_at + n * 0.15 - time.time()))
        store = SQLiteStore(f"sqlite:///{work}/race{n}.db")
        try:
            await store.open()
            await store.close()
            append(work / "opens.log", f"{n} ok")
        except Exception as exc:
            append(work / "opens.log", f"{n} {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    command, db, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if command == "redeliver":
        asyncio.run(redeliver(db, work, float(sys.argv[4])))
    elif command == "serve":
        asyncio.run(serve(db, work, sys.argv[4]))
    elif command == "hang":
        asyncio.run(hang(db, work))
    elif command == "open-race":
        asyncio.run(open_race(work, float(sys.argv[4])))
    else:
        raise SystemExit(f"unknown command {command!r}")
