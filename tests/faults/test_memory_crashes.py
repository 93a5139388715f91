"""A slice's memories and its messages survive a kill -9 together or not at all.

Rounds: each admits one note to every thread, then a worker of a subject agent that
remembers one fact per note (one slice may take several) kills itself with
SIGKILL at a slice commit: as it starts (the slice must leave nothing) or right after
it returned (the slice must have stored everything: its messages and its memory; when
memories were written after the commit, this lost the memory). After the kills, a
runtime in the test finishes the rest. Then, for every thread, the facts in memory are
exactly those of the notes its history shows handled.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from dormant import Runtime
from tests.faults.conftest import Workers
from tests.faults.memory_worker import agent, embedder
from tests.helpers import all_messages, check_history
from tests.integration.conftest import fast_settings

THREADS = 3
NOTES = 6
PHONE = "+1 555 0123"


def identity(t: int) -> dict[str, str]:
    return {"phone": PHONE, "device": f"dev-{t}"}


async def admit(db: Path, n: int) -> None:
    """Note ``n`` to every thread."""
    async with Runtime(f"sqlite:///{db}", [agent()], memory_embedder=embedder()) as rt:
        for t in range(THREADS):
            await rt.send(f"m{t}", f"note {n}", key=f"n{n}", identity=identity(t))


async def finish_and_check(db: Path) -> None:
    async with Runtime(
        f"sqlite:///{db}", [agent()], settings=fast_settings(), memory_embedder=embedder()
    ) as rt:
        await rt.run_until_idle(timeout=60)
        for t in range(THREADS):
            thread = f"m{t}"
            assert (await rt.thread(thread)).status == "active"
            history = await all_messages(rt.store, thread)
            check_history(history)
            notes = {m.content.removeprefix("note ") for m in history if m.role == "user"}
            assert notes == {str(n) for n in range(NOTES)}, f"{thread}: every note handled once"
            subject = await rt.memory.bind(identity(t))
            page = await rt.memory.list([subject], limit=100)
            facts = sorted(r.text for r in page.items if r.invalid_at is None)
            assert facts == sorted(f"fact {thread} {n}" for n in notes), f"{thread}: {facts}"
            history_ops = (await rt.memory.history([subject], limit=200)).items
            assert all(c.actor == f"thread:{thread}" for c in history_ops)


@pytest.mark.timeout(180)
def test_memories_commit_with_their_slice_across_kill_9s(tmp_path: Path, workers: Workers) -> None:
    db = tmp_path / "mem.db"
    rng = random.Random(16)
    kills = 0
    for n, mode in enumerate(("after", "before", "after", "before", "after", "after")):
        asyncio.run(admit(db, n))  # a slice per thread to commit (and those a kill left)
        nth = rng.randint(1, THREADS)
        proc = workers.start_module("tests.faults.memory_worker", str(db), mode, str(nth))
        try:
            proc.communicate(timeout=60)
        except Exception:
            proc.kill()
            raise
        assert proc.returncode == -9, f"the worker died at its commit ({mode}): {proc.returncode}"
        kills += 1
    assert kills == 6
    asyncio.run(finish_and_check(db))
