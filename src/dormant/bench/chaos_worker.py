"""The workload ``dormant bench chaos`` runs in a subprocess and kills at random moments.

    DORMANT_BENCH_WORKER_STORE=URL python -m dormant.bench.chaos_worker '{"dir": ..., "threads": 500, ...}'

Threads ``c0000``, ``c0001``, ... each get ``turns`` user turns, admitted in waves
(every thread's turn K, then run until idle, then turn K+1). Every fifth thread also
gets a follow-up text in the same admission as each turn, so two inputs wait in
one thread and must be recorded in admission order. What turn K does depends on
K mod 4 (see :func:`script`): an async idempotent ``lookup``, an async
non-idempotent ``charge``, an inline ``calc``, and either a child thread
(``spawn_thread`` → the child calls ``report_to_parent`` → the report arrives in
the parent) or two async calls at once.

Side effects are appended to ``DIR/effects.log`` (``charge THREAD CALL`` before the charge
"happens", ``lookup THREAD CALL`` each time a lookup runs), admissions acknowledged by the
store to ``DIR/acks.log`` (``ack THREAD KEY INPUT_ID``) right after ``admit``
returns, so the checker can prove that nothing acknowledged was lost. Both are
plain ``os.write`` calls: a SIGKILL loses nothing written before it. A restarted
worker resumes at the first wave not fully acknowledged (re-admitting is harmless:
the dedup keys are stable). ``start PID`` in the acks log marks that a worker has
opened the store; it then admits a probe input to a thread of its own (``probe-PID``)
before anything else. On stdout: ``first_commit <unix time>`` once its first
slice committed, ``COMPLETE`` at the end. With ``die_after_ack`` in the config the
worker SIGKILLs itself right after its probe is acknowledged; with
``hold_last_wave`` it does not admit the last wave and, once idle, waits to be killed.

With ``"role": "standby"`` the process admits nothing: it opens the store, writes
``standby PID`` to the acks log and runs the runtime (claims, tool calls) until SIGTERM,
like the other workers of a deployment that stay alive while one dies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..agent import Agent
from ..config import Settings
from ..models.base import ModelReply, ModelRequest
from ..models.scripted import ScriptedModel
from ..records import Claim, NewInput, ToolCall
from ..runtime import Runtime
from ..tools.spec import ToolContext, tool

#: Threads whose index is a multiple of this get a follow-up text with every turn.
FOLLOW_UP_EVERY = 5
#: Threads whose index is a multiple of this spawn a child on turns K = 3 (mod 4).
SPAWN_EVERY = 3
ADMIT_BATCH = 100
#: Exit status of a worker that a ``crash`` pill ended (137: as if killed for memory).
POISON_EXIT = 137
#: Timeout of the ``wedge`` pill (it never returns by itself).
WEDGE_TIMEOUT_S = 0.3
#: The poison-pill tools.
PILL_KINDS = ("crash", "wedge")
#: the environment variable a worker process reads its store URL from (argv is public)
URL_ENV = "DORMANT_BENCH_WORKER_STORE"

_effects_fd = -1


def thread_ids(threads: int) -> list[str]:
    """The workload's top-level thread ids."""
    return [f"c{i:04d}" for i in range(threads)]


def has_follow_up(index: int) -> bool:
    """Whether thread number ``index`` sends a follow-up with every turn."""
    return index % FOLLOW_UP_EVERY == 1


def spawns(index: int, turn: int) -> bool:
    """Whether thread number ``index`` spawns a child on ``turn``."""
    return turn % 4 == 3 and index % SPAWN_EVERY == 0


def turn_inputs(thread_id: str, index: int, turn: int) -> list[NewInput]:
    """The inputs of one thread's ``turn``: the text, and maybe its follow-up (same admission)."""
    items = [
        NewInput(
            thread_id=thread_id,
            kind="user",
            dedup_key=f"turn{turn}",
            content=f"{thread_id} turn {turn}",
            agent="chaos",
        )
    ]
    if has_follow_up(index):
        items.append(
            NewInput(
                thread_id=thread_id,
                kind="user",
                dedup_key=f"turn{turn}+",
                content=f"{thread_id} turn {turn} follow-up",
                agent="chaos",
            )
        )
    return items


def pill_ids(pills: int, turns: int) -> list[tuple[str, str, int]]:
    """(thread id, tool, wave) of each poison-pill thread; their waves spread over all but the
    last one (the harness holds that one back)."""
    return [(f"pill-{kind}-{n}", kind, n % max(1, turns - 1)) for n in range(pills) for kind in PILL_KINDS]


def pill_input(thread_id: str) -> NewInput:
    """The one input of a poison-pill thread."""
    return NewInput(thread_id=thread_id, kind="user", dedup_key="pill", content="pill", agent="chaos")


def probe_input(pid: int) -> NewInput:
    """The probe a worker started as process ``pid`` admits first (see :func:`main`)."""
    return NewInput(thread_id=f"probe-{pid}", kind="user", dedup_key="probe", content="probe", agent="chaos")


def thread_messages(index: int, waves: int) -> int:
    """How many messages top-level thread number ``index`` holds after ``waves`` waves."""
    total = 0
    for turn in range(waves):
        total += 1 + has_follow_up(index)
        if turn % 4 in (0, 1, 2):
            total += 3  # assistant with a call, its result, the closing answer
        elif spawns(index, turn):
            total += 5  # call, result, "waiting"; report, answer
        else:
            total += 4  # assistant with two calls, two results, the closing answer
    return total


#: Messages of a child thread (task, report call, its result, "reported") and of a
#: poison-pill thread (text, the call, the error result, the closing answer).
CHILD_MESSAGES = PILL_MESSAGES = 4


def expected_messages(threads: int, turns: int, pills: int = 0, waves: int | None = None) -> int:
    """How many messages the workload (``threads`` x ``turns``, ``pills`` of each kind) commits
    in its first ``waves`` waves (all by default), children and poison pills included,
    probes not, crash or not."""
    waves = turns if waves is None else waves
    total = PILL_MESSAGES * sum(1 for _, _, wave in pill_ids(pills, turns) if wave < waves)
    for index in range(threads):
        total += thread_messages(index, waves)
        total += CHILD_MESSAGES * sum(1 for turn in range(waves) if spawns(index, turn))
    return total


def _effect(kind: str, ctx: ToolContext) -> None:
    os.write(_effects_fd, f"{kind} {ctx.thread_id} {ctx.call_id}\n".encode())


@tool(mode="async", idempotent=True, timeout=10.0)
async def lookup(q: str, ctx: ToolContext) -> str:
    """Look something up; safe to run again (it has no lasting effect)."""
    _effect("lookup", ctx)
    await asyncio.sleep(0.005)
    return f"found {q}"


@tool(mode="async", timeout=10.0)
async def charge(amount: int, ctx: ToolContext) -> str:
    """Charge money: not idempotent. The effect is logged first, as a real one would happen."""
    _effect("charge", ctx)
    await asyncio.sleep(0.02)
    return f"charged {amount}"


@tool(mode="async", idempotent=True, timeout=10.0)
async def crash(ctx: ToolContext) -> str:
    """A poison pill: ends its worker process every time it runs (the run is logged first)."""
    _effect("crash", ctx)
    os._exit(POISON_EXIT)


@tool(mode="async", idempotent=True, timeout=WEDGE_TIMEOUT_S)
async def wedge(ctx: ToolContext) -> str:
    """A poison pill: never returns (its timeout cancels it; the run is logged first)."""
    _effect("wedge", ctx)
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


@tool
def calc(a: int, b: int) -> int:
    """Add two numbers (inline)."""
    return a + b


def _call(name: str, arguments: dict[str, Any], n: int = 0) -> ToolCall:
    return ToolCall(id=f"{name}{n}", name=name, arguments=json.dumps(arguments))


def script(request: ModelRequest) -> ModelReply:
    """The model: what to do is a function of the newest message only (deterministic)."""
    last = request.messages[-1]
    if request.thread_id.startswith("probe-"):
        return ModelReply(text="probe seen")
    if request.thread_id.startswith("pill-") and last.role == "user":
        return ModelReply(text="pill", tool_calls=(_call(request.thread_id.split("-")[1], {}),))
    if last.role == "tool":
        return ModelReply(text=f"done: {last.content[:40]}")
    if "/" in request.thread_id:  # a child: report, then stop
        if last.role == "user":
            return ModelReply(
                text="", tool_calls=(_call("report_to_parent", {"report": f"did {last.content}"}),)
            )
        return ModelReply(text="reported")
    if last.source == "report":
        return ModelReply(text="got the report")
    words = last.content.split()
    thread_id, turn = words[0], int(words[2])
    index = int(thread_id[1:])
    if turn % 4 == 0:
        calls: tuple[ToolCall, ...] = (_call("lookup", {"q": f"item {turn}"}),)
    elif turn % 4 == 1:
        calls = (_call("charge", {"amount": turn}),)
    elif turn % 4 == 2:
        calls = (_call("calc", {"a": turn, "b": index}),)
    elif spawns(index, turn):
        calls = (_call("spawn_thread", {"task": f"task {turn} of {thread_id}"}),)
    else:
        calls = (_call("lookup", {"q": f"item {turn}"}), _call("charge", {"amount": turn}, 1))
    return ModelReply(text=f"turn {turn}", tool_calls=calls)


class ChaosRuntime(Runtime):
    """A runtime that prints when its first slice of the workload committed (the end of
    recovery; the probe's slice does not count: it is always ready at once)."""

    first_commit: float | None = None

    async def run_slice(self, claim: Claim) -> None:
        """Run the slice; after the first committed one, print ``first_commit <time>``."""
        slices = self.stats.slices
        await super().run_slice(claim)
        committed = self.stats.slices > slices and not claim.thread_id.startswith("probe-")
        if self.first_commit is None and committed:
            self.first_commit = time.time()
            print(f"first_commit {self.first_commit:.6f}", flush=True)


def acked_waves(path: Path) -> int:
    """How many waves (from the first) are fully acknowledged in the acks log."""
    done: set[int] = set()
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("wave "):
                done.add(int(line.split()[1]))
    waves = 0
    while waves in done:
        waves += 1
    return waves


def batches(items: list[NewInput], size: int = ADMIT_BATCH) -> Iterator[list[NewInput]]:
    """``items`` in admissions of about ``size``, never splitting one thread's consecutive
    items: a turn and its follow-up must be admitted together, or another worker (the
    standby) may claim the thread between the two admissions and answer them apart."""
    batch: list[NewInput] = []
    for item in items:
        if len(batch) >= size and item.thread_id != batch[-1].thread_id:
            yield batch
            batch = []
        batch.append(item)
    if batch:
        yield batch


async def main(config: dict[str, Any]) -> None:
    """Run (or resume) the workload described by ``config`` to the end (the store URL is in
    :data:`URL_ENV`); a standby runs the runtime until SIGTERM instead."""
    global _effects_fd
    work = Path(config["dir"])
    _effects_fd = os.open(work / "effects.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    acks_fd = os.open(work / "acks.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    url = os.environ[URL_ENV]
    lease_s = float(config.get("lease_s", 1.0))
    concurrency = int(config.get("concurrency", 32))
    settings = Settings.build(
        concurrency=concurrency,
        tool_concurrency=concurrency,
        # a PostgreSQL claim is a round trip to the server: poll it less eagerly
        poll_s=0.005 if url.startswith("sqlite") else 0.02,
        lease_s=lease_s,
        retry_base_s=0.01,
        retry_max_s=0.2,
        tool_attempts=int(config.get("tool_attempts", 3)),
        worker_id=f"chaos-{os.getpid()}",
    )
    agent = Agent(name="chaos", model=ScriptedModel(script), tools=[lookup, charge, calc, crash, wedge])
    ids = thread_ids(int(config["threads"]))
    turns = int(config["turns"])
    pills = pill_ids(int(config.get("pills", 0)), turns)
    async with ChaosRuntime(url, [agent], settings=settings) as rt:
        # a dead worker's running calls are reconciled once their lease expires: keep it
        # as short as the thread lease (the tools here take milliseconds)
        rt.dispatcher.lease_s = lease_s
        if config.get("role") == "standby":
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, rt.stop)
            os.write(acks_fd, f"standby {os.getpid()}\n".encode())
            await rt.run()  # until SIGTERM: running slices and calls finish first
            print("STOPPED", flush=True)
            return
        os.write(acks_fd, f"start {os.getpid()}\n".encode())  # the store is open: recovery begins
        # every start admits one probe input to a thread of its own (two messages in the end);
        # with die_after_ack, the worker dies the moment the store says it is durable
        (probe,) = await rt.admit([probe_input(os.getpid())])
        os.write(acks_fd, f"ack {probe.thread_id} {probe.dedup_key} {probe.input_id}\n".encode())
        if config.get("die_after_ack"):
            os.kill(os.getpid(), signal.SIGKILL)
        await rt.run_until_idle()  # finish what the killed worker left in flight
        # while the harness still has kills to make, the last wave is held back: the
        # worker then waits to be killed instead of finishing (so every kill lands)
        last = turns - 1 if config.get("hold_last_wave") else turns
        for turn in range(acked_waves(work / "acks.log"), last):
            items = [item for index, t in enumerate(ids) for item in turn_inputs(t, index, turn)]
            items += [pill_input(tid) for tid, _, wave in pills if wave == turn]
            for batch in batches(items):
                admissions = await rt.admit(batch)
                lines = "".join(f"ack {a.thread_id} {a.dedup_key} {a.input_id}\n" for a in admissions)
                os.write(acks_fd, lines.encode())
            os.write(acks_fd, f"wave {turn}\n".encode())
            await rt.run_until_idle()
        if last < turns:
            await asyncio.Event().wait()  # until SIGKILL
    print("COMPLETE", flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
