"""The "state" and "memories" sections of a prompt, rendered within their budgets.

Both go after the compaction summary (inside the system message, where the adapters
put the summary). Each is bounded in tokens by its share of the budget
(:meth:`dormant.view.pages.PagePolicy.sections`), proven without a tokenizer: a section's
UTF-8 bytes bound its tokens, and it is cut to that many bytes (whole lines: a line
that does not fit is left out, a long value is clipped first).

Pure functions of their inputs; no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from .budget import utf8_len

__all__ = ["MAX_LINE_CHARS", "MEMORIES_HEADER", "STATE_HEADER", "compose", "memories", "state"]

STATE_HEADER: Final = "[state: what this conversation is about now]"
PROFILE_HEADER: Final = "[profile: what is known about this user for good]"
MEMORIES_HEADER: Final = "[memories: from this user's earlier conversations, best first]"
#: Characters of one line at most (a longer value is clipped with an ellipsis).
MAX_LINE_CHARS: Final = 400
#: A line that does not fit is shown cut to the room left when that is at least this many bytes.
MIN_CLIPPED_BYTES: Final = 64
#: What joins the summary and the sections (counted in their budgets).
JOIN: Final = "\n\n"


def _cut(line: str, room: int) -> str:
    """The head of ``line`` that fits ``room`` UTF-8 bytes with an ellipsis."""
    data = line.encode("utf-8", "surrogatepass")[: max(0, room - 3)]
    return data.decode("utf-8", "ignore") + "…"


def _line(text: str) -> str:
    text = " ".join(text.split())  # one line: no newline can fake a section header
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def _bounded(header: str, lines: Iterable[str], budget: int) -> tuple[str, tuple[int, ...]]:
    """``header`` and as many of ``lines`` (in order) as fit ``budget`` bytes with it,
    and the indexes of the lines shown; "" when not even the header and one line fit."""
    out: list[str] = []
    shown: list[int] = []
    used = utf8_len(JOIN) + utf8_len(header)
    for index, line in enumerate(lines):
        cost = 1 + utf8_len(line)  # its newline
        if used + cost > budget:
            room = budget - used - 1
            if room < MIN_CLIPPED_BYTES:
                continue  # a shorter line further down may still fit
            line = _cut(line, room)  # the rest of the room: this line's head
            cost = 1 + utf8_len(line)
        out.append(line)
        shown.append(index)
        used += cost
    return ("\n".join([header, *out]), tuple(shown)) if out else ("", ())


def state(registers: Sequence[tuple[str, str]], profile: Sequence[tuple[str, str]], budget: int) -> str:
    """The "state" section: the thread's short-term register (newest first) then the
    subject's long-term one, ``key: value`` (values as JSON text), within ``budget``
    bytes (so tokens). "" when there is nothing, or no room."""
    if budget <= 0 or (not registers and not profile):
        return ""
    now, _ = _bounded(STATE_HEADER, (_line(f"{k}: {v}") for k, v in registers), budget)
    left = budget - utf8_len(now)
    kept, _ = _bounded(PROFILE_HEADER, (_line(f"{k}: {v}") for k, v in profile), left)
    return "\n".join(part for part in (now, kept) if part)


def memories(hits: Sequence[tuple[str, Mapping[str, object]]], budget: int) -> tuple[str, tuple[int, ...]]:
    """The "memories" section: recalled records (text, tags), best first, within
    ``budget`` bytes (so tokens), and the indexes in ``hits`` of those it shows
    ("" and none when there are none, or no room)."""
    if budget <= 0 or not hits:
        return "", ()

    def render(text: str, tags: Mapping[str, object]) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in tags.items() if k != "key")
        return _line(f"- {text} ({shown})" if shown else f"- {text}")

    return _bounded(MEMORIES_HEADER, (render(text, tags) for text, tags in hits), budget)


def compose(summary: str | None, *sections: str) -> str | None:
    """The summary text a request carries: the summary, then each non-empty section."""
    parts = [part for part in (summary, *sections) if part]
    return JOIN.join(parts) if parts else None
