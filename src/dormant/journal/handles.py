"""The runtime's handle on a thread's state journal (a mixin of
:class:`~dormant.runtime.Runtime`): ``rt.state``, ``rt.checkpoint``, ``rt.fork`` and
``rt.rewind``. The rows and their transactions are the store's (``store.journal``)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec

from ..records import JournalEntry, Thread
from .rules import CheckpointPolicy

if TYPE_CHECKING:
    from ..store import Store


class JournalApi:
    """Reading a thread's state, writing due checkpoints, branching from the past."""

    store: Store
    checkpoints: CheckpointPolicy
    clock: Callable[[], float]

    async def state(self, thread_id: str, *, at_seq: int | None = None) -> dict[str, Any]:
        """The thread's key/value state (values decoded from JSON): recovered from the
        newest recoverable checkpoint plus the journal after it, or, with ``at_seq``,
        as it was at that journal seq (the journal itself is never rewritten)."""
        if at_seq is None:
            raw = (await self.store.journal.recover(thread_id)).state
        else:
            raw = await self.store.journal.state_at(thread_id, at_seq)
        return {key: msgspec.json.decode(value) for key, value in raw.items()}

    async def checkpoint(self, thread_id: str) -> JournalEntry | None:
        """Write the state checkpoint the configured policy says is due, if any (the
        background retention pass and ``dormant gc`` write due checkpoints by themselves)."""
        return await self.store.journal.maybe_checkpoint(thread_id, self.checkpoints, self.clock())

    async def fork(self, thread_id: str, at_seq: int, *, new_id: str | None = None) -> Thread:
        """A new thread that continues ``thread_id`` from its message ``at_seq``: its views
        read ``thread_id``'s history up to there (it is a child of it), its state is the
        state ``thread_id`` had then. ``thread_id`` is not changed: time travel makes a
        branch, never rewrites history. ``new_id`` defaults to ``<thread_id>~<random>``."""
        state = await self.store.journal.state_at_message(thread_id, at_seq)
        return await self.store.fork_thread(thread_id, new_id or _branch_id(thread_id), at_seq, state)

    async def rewind(
        self, thread_id: str, checkpoint: JournalEntry | int, *, new_id: str | None = None
    ) -> Thread:
        """A new branch of ``thread_id`` from one of its recoverable checkpoints (its
        journal entry or seq): the checkpoint's state and the history up to the message
        it was taken at. ``thread_id`` is not changed (see :meth:`fork`)."""
        seq = checkpoint if isinstance(checkpoint, int) else checkpoint.seq
        head, state = await self.store.journal.checkpoint_state(thread_id, seq)
        return await self.store.fork_thread(thread_id, new_id or _branch_id(thread_id), head.msg_seq, state)


def _branch_id(thread_id: str) -> str:
    """A new thread id for a branch of ``thread_id`` (same tenant prefix)."""
    return f"{thread_id}~{uuid.uuid4().hex[:12]}"
