"""The view builder: the bounded slice of history a model call sees.

A view is read from the newest end of the thread (and, for a child thread, from
its ancestors up to the spawn point, by reference) and stops at the first bound
it meets: message count or bytes. It never starts with a tool result whose
assistant tool call was left out, so a call and its results are kept or
dropped together.

:class:`ViewCache` keeps recent views in RAM under a hard byte and entry budget,
so the next slice of a thread extends the view it already has instead of
reading it again. It only accelerates: an entry is used only when the thread's
``last_seq``, read from the store in the same slice, says it is current.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from .records import Message, Thread, ViewLimits

# fetch(thread_id, max_seq, limit) -> newest messages of that thread with seq <= max_seq,
# newest first, at most ``limit`` of them.
FetchNewest = Callable[[str, int, int], Iterable[Message]]
# parent(thread_id) -> (parent_id, parent_seq) or None
ParentOf = Callable[[str], "tuple[str, int] | None"]

#: RAM a cached message costs beyond its text (struct, str headers, tuple slot), for budgets.
MESSAGE_OVERHEAD = 160


def message_bytes(message: Message) -> int:
    """Approximate size of a message in a prompt, in bytes of text."""
    size = len(message.content)
    for call in message.tool_calls:
        size += len(call.name) + len(call.arguments) + 16
    return size + 16


def build_view(
    thread: Thread, limits: ViewLimits, fetch: FetchNewest, parent_of: ParentOf
) -> tuple[Message, ...]:
    """Newest messages of ``thread`` and its ancestors that fit ``limits``, oldest first."""
    picked: list[Message] = []  # newest first
    used = 0
    thread_id: str | None = thread.id
    max_seq = thread.last_seq
    while thread_id is not None and len(picked) < limits.max_messages:
        full = False
        for message in fetch(thread_id, max_seq, limits.max_messages - len(picked)):
            size = message_bytes(message)
            if picked and used + size > limits.max_bytes:
                full = True
                break
            picked.append(message)
            used += size
        if full:
            break
        link = parent_of(thread_id) if thread_id != thread.id else _link(thread)
        if link is None:
            break
        thread_id, max_seq = link
    picked.reverse()
    return drop_orphans(picked)


def _link(thread: Thread) -> tuple[str, int] | None:
    return (thread.parent_id, thread.parent_seq) if thread.parent_id else None


def drop_orphans(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Drop leading tool results whose assistant call is not in the view."""
    start = 0
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    return tuple(messages[start:])


def extend_view(view: Sequence[Message], new: Sequence[Message], limits: ViewLimits) -> tuple[Message, ...]:
    """The view :func:`build_view` would return once ``new`` is appended after ``view``.

    Both keep the longest suffix that fits the bounds (at least one message), then
    drop leading orphan tool results; so extending a current view is exact.
    """
    return _extend(view, new, limits, sum(message_bytes(m) for m in view))[0]


def _extend(
    view: Sequence[Message], new: Sequence[Message], limits: ViewLimits, view_bytes: int
) -> tuple[tuple[Message, ...], int]:
    """:func:`extend_view` plus the text bytes of the result, given those of ``view``."""
    combined = [*view, *new]
    used = view_bytes + sum(message_bytes(m) for m in new)
    start = 0
    while len(combined) - start > 1 and (
        len(combined) - start > limits.max_messages or used > limits.max_bytes
    ):
        used -= message_bytes(combined[start])
        start += 1
    while start < len(combined) and combined[start].role == "tool":
        used -= message_bytes(combined[start])
        start += 1
    return tuple(combined[start:]), used


class ViewCache:
    """Per-thread views, least recently used first out, capped by bytes and entries."""

    def __init__(self, max_bytes: int, max_entries: int = 100_000) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        # thread id -> (last_seq, limits, view, text bytes of the view)
        self._entries: OrderedDict[str, tuple[int, ViewLimits, tuple[Message, ...], int]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, thread_id: str, last_seq: int, limits: ViewLimits) -> tuple[Message, ...] | None:
        """The cached view of ``thread_id`` if it is current at ``last_seq``."""
        entry = self._entries.get(thread_id)
        if entry is None or entry[0] != last_seq or entry[1] != limits:
            self.misses += 1
            return None
        self._entries.move_to_end(thread_id)
        self.hits += 1
        return entry[2]

    def put(
        self,
        thread_id: str,
        last_seq: int,
        limits: ViewLimits,
        view: tuple[Message, ...],
        text_bytes: int | None = None,
    ) -> None:
        """Remember ``view`` as the view of ``thread_id`` at ``last_seq``."""
        self.discard(thread_id)
        if text_bytes is None:
            text_bytes = sum(message_bytes(m) for m in view)
        if _cost(view, text_bytes) > self.max_bytes or self.max_entries <= 0:
            return
        self._entries[thread_id] = (last_seq, limits, view, text_bytes)
        self.bytes += _cost(view, text_bytes)
        while self.bytes > self.max_bytes or len(self._entries) > self.max_entries:
            _, (_, _, old, old_bytes) = self._entries.popitem(last=False)
            self.bytes -= _cost(old, old_bytes)

    def advance(self, thread_id: str, messages: Sequence[Message]) -> None:
        """A slice committed ``messages``: extend the cached view, or drop it if stale."""
        entry = self._entries.get(thread_id)
        if entry is None or not messages:
            return
        last_seq, limits, view, view_bytes = entry
        if messages[0].seq != last_seq + 1:
            self.discard(thread_id)
            return
        new_view, new_bytes = _extend(view, messages, limits, view_bytes)
        self.put(thread_id, messages[-1].seq, limits, new_view, new_bytes)

    def discard(self, thread_id: str) -> None:
        """Forget ``thread_id``'s view."""
        entry = self._entries.pop(thread_id, None)
        if entry is not None:
            self.bytes -= _cost(entry[2], entry[3])

    def clear(self) -> None:
        """Forget everything."""
        self._entries.clear()
        self.bytes = 0


def _cost(view: tuple[Message, ...], text_bytes: int) -> int:
    """RAM a cached view is charged: its text plus a per-message overhead."""
    return text_bytes + MESSAGE_OVERHEAD * len(view)
