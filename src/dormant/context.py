"""The view builder: the bounded slice of history a model call sees.

A view is read from the newest end of the thread (and, for a child thread, from
its ancestors up to the spawn point, by reference) and stops at the first bound
it meets: message count or bytes. It never starts with a tool result whose
assistant tool call was left out, so a call and its results are kept or
dropped together.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .records import Message, Thread, ViewLimits

# fetch(thread_id, max_seq, limit) -> newest messages of that thread with seq <= max_seq,
# newest first, at most ``limit`` of them.
FetchNewest = Callable[[str, int, int], Iterable[Message]]
# parent(thread_id) -> (parent_id, parent_seq) or None
ParentOf = Callable[[str], "tuple[str, int] | None"]


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


def drop_orphans(messages: list[Message]) -> tuple[Message, ...]:
    """Drop leading tool results whose assistant call is not in the view."""
    start = 0
    while start < len(messages) and messages[start].role == "tool":
        start += 1
    return tuple(messages[start:])
