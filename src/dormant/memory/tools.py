"""The memory tools of an agent with a subject: ``remember``, ``recall``, ``forget``, ``set_state``.

They act only on the slice's own subject, through :attr:`ToolContext.memory`: none
takes a subject, a binding key or a tenant, so a model cannot reach another
subject's memories. Writes are queued and land only when the slice commits
(:mod:`dormant.slices.memory`); ``set_state`` with the thread scope is a change record
of the thread's state journal, in the slice's own transaction.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ..errors import NotFound
from ..tools.spec import ToolContext, ToolSpec, make_tool

__all__ = ["MEMORY_TOOLS", "forget", "recall", "remember", "set_state"]

#: Longest text ``remember`` stores; most tags; longest state key.
MAX_TEXT = 2000
MAX_TAGS = 8
MAX_KEY = 128
NO_SUBJECT = "error: this conversation has no identified user, so there is no memory to use"


def _clean_tags(tags: dict[str, str] | None) -> dict[str, str | int | float | bool]:
    out: dict[str, str | int | float | bool] = {}
    for name, value in (tags or {}).items():
        if len(out) >= MAX_TAGS:
            break
        if isinstance(name, str) and 0 < len(name) <= 64 and isinstance(value, str) and 0 < len(value) <= 200:
            out[name] = value
    return out


def remember(
    text: str,
    ctx: ToolContext,
    tags: dict[str, str] | None = None,
    kind: Literal["fact", "preference", "event"] = "fact",
) -> str:
    """Remember a durable fact about the user for later conversations. Tags are
    key/value pairs (e.g. {"type": "complaint", "order": "ORD-1"}); a tag "key" names
    what the fact is about, and a later fact with the same key replaces this one."""
    handle = ctx.memory
    if handle is None:
        return NO_SUBJECT
    text = text.strip()
    if not text:
        return "error: nothing to remember"
    handle.remember(text[:MAX_TEXT], tags=_clean_tags(tags), kind=kind, source_seq=ctx.message_seq)
    return "remembered (saved when this turn completes)"


async def recall(query: str, ctx: ToolContext, tags: dict[str, str] | None = None, k: int = 5) -> str:
    """Search what is remembered about the user. Returns one line per memory, best
    first, with its id (for forget)."""
    handle = ctx.memory
    if handle is None:
        return NO_SUBJECT
    found = await handle.recall(query, tags=_clean_tags(tags), k=max(1, min(k, 20)))
    if not found.hits:
        return "nothing remembered matches"
    lines = []
    for hit in found.hits:
        record = hit.record
        shown = ", ".join(f"{name}={value}" for name, value in record.tags.items())
        lines.append(f"[{record.id}] {record.text}" + (f" ({shown})" if shown else ""))
    return "\n".join(lines)


async def forget(id: str, reason: str, ctx: ToolContext) -> str:
    """Mark a remembered memory (by the id recall showed) as no longer true, with a
    reason. It is kept in the history, never shown again."""
    handle = ctx.memory
    if handle is None:
        return NO_SUBJECT
    try:
        await handle.forget(id, reason[:500])
    except NotFound:
        return f"error: no memory {id!r} of this user"
    return "forgotten (when this turn completes)"


def set_state(key: str, value: Any, ctx: ToolContext, scope: Literal["thread", "subject"] = "thread") -> str:
    """Note what this conversation is about now (scope "thread": an id, a code, kept for
    the next few turns, e.g. key "order_id"), or a lasting fact of the user's profile
    (scope "subject", e.g. key "preferences"). A null value clears the key."""
    handle = ctx.memory
    if handle is None:
        return NO_SUBJECT
    key = key.strip()
    if not key or len(key) > MAX_KEY:
        return f"error: a state key is 1..{MAX_KEY} characters"
    try:
        encoded = msgspec.json.encode(value).decode() if value is not None else None
    except (TypeError, msgspec.EncodeError):
        return "error: the value must be JSON"
    if scope == "subject":
        handle.set_profile(key, encoded)
    else:
        ctx.set_state(key, value)
    return "noted"


MEMORY_TOOLS: tuple[ToolSpec, ...] = (
    make_tool(remember),
    make_tool(recall),
    make_tool(forget),
    make_tool(set_state),
)
