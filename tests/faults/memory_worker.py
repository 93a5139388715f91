"""A worker that remembers, and kills itself with SIGKILL at a slice commit.

    python -m tests.faults.memory_worker DB MODE N   # MODE: before | after | never

Its agent has a subject: each user input ``note K`` a slice takes makes the model call
``remember("fact <thread> K")`` (one call per note), and then answer "ok". With ``before`` the process dies
as its N-th slice commit starts (nothing of that slice may be stored), with ``after``
right after the N-th commit returned (all of it must be), with ``never`` it runs until
killed from outside.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from itertools import count

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel, ToolCall
from dormant.memory import HashingEmbedder
from dormant.records import CommitPlan
from dormant.store.core import StoreCore
from dormant.subject import SubjectOptions
from tests.faults.worker import settings

_ids = count()


def script(request: ModelRequest) -> ModelReply:
    """The slice's new ``note K`` inputs -> one remember("fact <thread> K") each; after
    the tool results -> "ok"."""
    new: list[str] = []
    for message in reversed(request.messages):
        if message.role != "user":
            break
        new.append(message.content)
    calls = tuple(
        ToolCall(
            id=f"c{os.getpid()}-{next(_ids)}",
            name="remember",
            arguments=json.dumps({"text": f"fact {request.thread_id} {note.removeprefix('note ')}"}),
        )
        for note in reversed(new)
        if note.startswith("note ")
    )
    return ModelReply(text="", tool_calls=calls) if calls else ModelReply(text="ok")


def agent() -> Agent:
    """The agent every process of the test hosts."""
    return Agent(name="m", model=ScriptedModel(script), subject=SubjectOptions(recall=False))


def embedder() -> HashingEmbedder:
    """The embedder every process of the test uses (one memory, one embedder)."""
    return HashingEmbedder(32)


def die_at(mode: str, nth: int) -> None:
    """Make this process SIGKILL itself at its ``nth`` slice commit (before or after it)."""
    commit = StoreCore.commit_slice
    seen = count(1)

    async def dying(self: StoreCore, plan: CommitPlan) -> None:
        n = next(seen)
        if mode == "before" and n == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        await commit(self, plan)
        if mode == "after" and n == nth:
            os.kill(os.getpid(), signal.SIGKILL)

    StoreCore.commit_slice = dying  # type: ignore[method-assign]


async def main(db: str, mode: str, nth: int) -> None:
    if mode != "never":
        die_at(mode, nth)
    async with Runtime(
        f"sqlite:///{db}",
        [agent()],
        settings=settings("mem", concurrency=2, model_retries=100),
        memory_embedder=embedder(),
    ) as rt:
        await rt.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
