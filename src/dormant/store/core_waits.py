"""The model-wait rules of :class:`~dormant.store.core.StoreCore` (a mixin of it): a
thread whose model endpoint is down waits with the reason on its row
(``wait_reason``, ``wait_until``), and is woken when that endpoint answers again."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import Backend

#: Most characters of a thread's ``wait_reason`` kept.
MAX_WAIT_REASON = 1_000


def cut_reason(wait: str | None) -> str | None:
    """A wait reason as stored: at most :data:`MAX_WAIT_REASON` characters."""
    return None if wait is None else wait[:MAX_WAIT_REASON]


class ModelWaits:
    """Threads waiting on a model endpoint."""

    if TYPE_CHECKING:
        backend: Backend

    async def wake_waiting(self, endpoint: str) -> int:
        """Make the threads waiting on model ``endpoint`` (their ``wait_reason`` names it)
        claimable now: it answers again. How many; a reason stays until its thread runs,
        and a thread whose slice holds a lease keeps it."""
        if not endpoint:
            return 0
        return await self.backend.wake_waiting(endpoint[:MAX_WAIT_REASON])
