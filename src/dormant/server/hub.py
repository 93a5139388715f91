"""The event hub: tells event-stream connections that their thread changed.

Durable events (messages, status) are never held here: a connection reads them from
the store itself, by pages, from the last seq it sent, so a slow or reconnecting
client costs the server one page at a time and replay needs nothing but the store.
The hub only carries *wake-ups*, the live model text of a running slice
(``delta`` events) and the progress of running tool calls (``progress`` events: the
newest per call, for at most :data:`MAX_PROGRESS_CALLS` calls), none of it durable.
Each subscriber holds at most ``queue_bytes`` of live text; one that falls further
behind is marked dropped with a reason and its connection ends (the client resumes
with ``Last-Event-ID`` from the store). Pushing is O(1) per subscriber and never
waits, so a slice is never slowed by a client.

Wake-ups come from the runtime's ``on_change`` hook (slices of this process) and
from a poll of the watched threads' rows every ``poll_s`` (slices of other
processes: ``--workers N`` or other ``serve`` processes on one PostgreSQL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable

from ..errors import Overloaded
from ..models.base import ModelEvent, TextDelta
from ..records import Thread
from ..tools.spec import ToolProgress

log = logging.getLogger("dormant.server.hub")

#: Running calls whose newest progress one subscriber keeps at most.
MAX_PROGRESS_CALLS = 32


class Subscriber:
    """One connection's interest in one thread: a wake flag and a byte-bounded text queue."""

    __slots__ = (
        "deltas",
        "dropped",
        "progress",
        "queue_bytes",
        "queued_bytes",
        "rolled_back",
        "thread_id",
        "wake",
    )

    def __init__(self, thread_id: str, queue_bytes: int) -> None:
        self.thread_id = thread_id
        self.queue_bytes = queue_bytes
        self.wake = asyncio.Event()
        self.deltas: deque[str] = deque()
        self.queued_bytes = 0
        self.dropped: str | None = None
        self.rolled_back = False  # the live text sent so far was discarded (an interrupted slice)
        #: the newest progress of each running call not yet sent (bounded: the oldest
        #: call's goes first)
        self.progress: dict[str, ToolProgress] = {}

    def push(self, text: str) -> None:
        """Queue live text; over the byte cap, drop the subscriber instead (never wait)."""
        if self.dropped is not None:
            return
        size = len(text.encode())
        if self.queued_bytes + size > self.queue_bytes:
            self.dropped = f"slow client: more than {self.queue_bytes} bytes of live events queued"
            self.deltas.clear()
            self.queued_bytes = 0
        else:
            self.deltas.append(text)
            self.queued_bytes += size
        self.wake.set()

    def push_progress(self, event: ToolProgress) -> None:
        """Keep ``event`` as its call's newest progress (replacing an unsent older one)."""
        if self.dropped is not None:
            return
        self.progress.pop(event.call_id, None)
        if len(self.progress) >= MAX_PROGRESS_CALLS:
            del self.progress[next(iter(self.progress))]
        self.progress[event.call_id] = event
        self.wake.set()

    def take_progress(self) -> list[ToolProgress]:
        """The progress events queued, oldest call first (then none are)."""
        items = list(self.progress.values())
        self.progress.clear()
        return items

    def take(self) -> list[str]:
        """Everything queued, oldest first (the queue is then empty)."""
        items = list(self.deltas)
        self.deltas.clear()
        self.queued_bytes = 0
        return items


class Hub:
    """Fans thread changes and live text out to subscribers; bounded by ``max_subscribers``."""

    def __init__(
        self,
        read_thread: Callable[[str], Awaitable[Thread]],
        *,
        max_subscribers: int = 10_000,
        queue_bytes: int = 64 * 1024,
        poll_s: float = 1.0,
    ) -> None:
        self.read_thread = read_thread
        self.max_subscribers = max_subscribers
        self.queue_bytes = queue_bytes
        self.poll_s = poll_s
        self._subs: dict[str, set[Subscriber]] = {}
        self._count = 0
        self._seen: dict[str, tuple[int, str, int]] = {}  # thread -> (last_seq, status, awaiting)
        self.dropped = 0
        #: set when the server shuts down: streams end (their clients resume elsewhere)
        self.closing = False

    @property
    def subscribers(self) -> int:
        """Connections subscribed now."""
        return self._count

    def close(self) -> None:
        """The server is stopping: wake every subscriber so its stream can end."""
        self.closing = True
        for subs in self._subs.values():
            for sub in subs:
                sub.wake.set()

    def check_room(self) -> None:
        """Overloaded (with a retry hint) when ``max_subscribers`` are subscribed."""
        if self._count >= self.max_subscribers:
            raise Overloaded(f"{self.max_subscribers} event streams are open", retry_after=5.0)

    @contextlib.asynccontextmanager
    async def subscribe(self, thread_id: str) -> AsyncIterator[Subscriber]:
        """A subscriber to ``thread_id`` for the block's duration; Overloaded when full."""
        self.check_room()
        sub = Subscriber(thread_id, self.queue_bytes)
        self._subs.setdefault(thread_id, set()).add(sub)
        self._count += 1
        try:
            yield sub
        finally:
            subs = self._subs.get(thread_id)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self._subs[thread_id]
                    self._seen.pop(thread_id, None)
            self._count -= 1
            if sub.dropped is not None:
                self.dropped += 1

    def changed(self, thread_id: str) -> None:
        """Wake the thread's subscribers (the runtime's ``on_change`` hook)."""
        for sub in self._subs.get(thread_id, ()):
            sub.wake.set()

    def rollback(self, thread_id: str) -> None:
        """The thread's running slice was cancelled: its live text is void (tell subscribers)."""
        for sub in self._subs.get(thread_id, ()):
            sub.take()
            sub.rolled_back = True
            sub.wake.set()

    def delta(self, thread_id: str, event: ModelEvent) -> None:
        """Queue live model text for the thread's subscribers (the runtime's ``on_delta`` hook)."""
        subs = self._subs.get(thread_id)
        if subs and type(event) is TextDelta and event.text:
            for sub in subs:
                sub.push(event.text)

    def tool_progress(self, thread_id: str, event: ToolProgress) -> None:
        """Queue a running call's progress for the thread's subscribers (the dispatcher's
        ``on_progress`` hook); rate-limited per call where it is reported."""
        for sub in self._subs.get(thread_id, ()):
            sub.push_progress(event)

    async def poll(self, stop: asyncio.Event) -> None:
        """Wake subscribers of threads whose row changed (seq, status, open calls), every ``poll_s``.

        Reads one row per watched thread per round; a thread that fails to read is
        skipped this round (its subscribers keep waiting, their heartbeats go on).
        """
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_s)
            for thread_id in list(self._subs):
                try:
                    thread = await self.read_thread(thread_id)
                except Exception as exc:
                    log.debug("hub_poll_failed", extra={"thread_id": thread_id, "error": str(exc)})
                    continue
                mark = (thread.last_seq, thread.status, thread.awaiting)
                if self._seen.get(thread_id) != mark and thread_id in self._subs:
                    self._seen[thread_id] = mark
                    self.changed(thread_id)
