"""Durable facts extracted by the compaction call itself: no model call per message.

When compaction runs for an agent that extracts facts, its one model call is asked for
the summary *and*, after a marker line, a JSON array of durable facts (text, tags, key
tag, importance). :func:`split` takes the reply apart tolerantly: a reply without the
marker, or with facts that do not parse, still compacts (its facts are just none);
each fact that does not fit the shape is dropped alone. The facts become memory
records of the thread's subject, with supersession by their key tag
(:mod:`dormant.memory`).

Pure logic; what it costs in tokens is :func:`extra_tokens`.
"""

from __future__ import annotations

import json
import re
from typing import Final

import msgspec

from ..tokens import DEFAULT_ENCODING, count_text

__all__ = [
    "FACTS_INSTRUCTION",
    "MARKER",
    "MAX_FACTS",
    "Extraction",
    "Fact",
    "extra_tokens",
    "instruction",
    "split",
]

#: The line that separates the summary from the facts in a compaction reply.
MARKER: Final = "<<<FACTS>>>"
#: Facts kept from one compaction at most (the rest are dropped).
MAX_FACTS: Final = 20
#: Characters of a fact's text at most; tags: entries and characters of a key or value.
MAX_FACT_CHARS: Final = 500
MAX_TAGS: Final = 8
MAX_TAG_CHARS: Final = 64
#: The kinds a fact may declare (a memory record's kinds less tenant-wide knowledge).
FACT_KINDS: Final = frozenset({"fact", "preference", "event", "profile"})

FACTS_INSTRUCTION: Final = """

After the summary, write a line containing only {marker} and then a JSON array (at most \
{max_facts} items, [] if none) of durable facts about the user or customer that should be \
remembered in later conversations: standing preferences, identifiers, promises made, \
complaints, decisions. Each item: {{"text": "one self-contained sentence", "tags": \
{{"type": "...", "order": "..."}}, "key": "what it is about, e.g. shipping_address, when a \
later fact with the same key replaces it, else null", "kind": "fact|preference|event|profile", \
"importance": 0.0-1.0}}. Do not repeat facts that only matter inside this conversation."""

#: Tag names a fact may not set (the memory store owns them).
_RESERVED_TAGS: Final = frozenset({"key"})
_TAG_NAME = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class Fact(msgspec.Struct, frozen=True, kw_only=True):
    """One durable fact from a compaction reply (see :func:`split`)."""

    text: str
    tags: dict[str, str | int | float | bool] = {}
    #: the key tag: a later fact of the subject with the same key supersedes this one
    key: str | None = None
    kind: str = "fact"
    importance: float = 0.5


class Extraction(msgspec.Struct, frozen=True, kw_only=True):
    """A compaction reply taken apart: the summary, the facts, and the characters the
    facts part took (what asking for facts added to the reply)."""

    summary: str
    facts: tuple[Fact, ...] = ()
    facts_text: str = ""
    #: why facts were expected but none could be read (None: read, or not asked)
    problem: str | None = None


def instruction(max_facts: int = MAX_FACTS) -> str:
    """What is appended to the compaction prompt to ask for facts."""
    return FACTS_INSTRUCTION.format(marker=MARKER, max_facts=max_facts)


def extra_tokens(reply: Extraction, encoding: str = DEFAULT_ENCODING, max_facts: int = MAX_FACTS) -> int:
    """Tokens asking for facts added to one compaction: the instruction in the request
    plus the facts part of the reply (counted exactly)."""
    return count_text(instruction(max_facts), encoding) + (
        count_text(reply.facts_text, encoding) if reply.facts_text else 0
    )


def split(text: str, *, max_facts: int = MAX_FACTS) -> Extraction:
    """The summary and the facts of a compaction reply ``text``.

    The summary is everything before the last marker line (all of ``text`` when there
    is none). The facts part may be fenced (```json), or have prose around the array;
    facts that are not objects with a non-empty ``text`` are dropped, fields of the
    wrong type are defaulted, importance is clamped to 0..1, text and tags are bounded.
    Never raises.
    """
    at = text.rfind(MARKER)
    if at < 0:
        return Extraction(summary=text.strip(), problem=None)
    summary, rest = text[:at].strip(), text[at + len(MARKER) :]
    facts, problem = _parse(rest, max_facts)
    return Extraction(summary=summary, facts=facts, facts_text=text[at:], problem=problem)


def _parse(rest: str, max_facts: int) -> tuple[tuple[Fact, ...], str | None]:
    start, end = rest.find("["), rest.rfind("]")
    if start < 0 or end < start:
        return (), "no JSON array after the facts marker"
    try:
        items = json.loads(rest[start : end + 1])
    except ValueError as exc:
        return (), f"facts are not JSON: {exc}"
    if not isinstance(items, list):  # pragma: no cover - a bracketed value is a list
        return (), "facts are not a JSON array"
    facts = []
    for item in items:
        fact = _fact(item)
        if fact is not None:
            facts.append(fact)
        if len(facts) >= max_facts:
            break
    return tuple(facts), None


def _fact(item: object) -> Fact | None:
    if not isinstance(item, dict):
        return None
    text = item.get("text")
    if not isinstance(text, str) or not text.strip():
        return None
    tags: dict[str, str | int | float | bool] = {}
    raw_tags = item.get("tags")
    if isinstance(raw_tags, dict):
        for name, value in raw_tags.items():
            if len(tags) >= MAX_TAGS:
                break
            if not isinstance(name, str) or not _TAG_NAME.match(name) or name in _RESERVED_TAGS:
                continue
            if isinstance(value, str):
                if value.strip():
                    tags[name] = value.strip()[:MAX_TAG_CHARS]
            elif isinstance(value, bool | int | float):
                tags[name] = value
    key = item.get("key")
    key = key.strip()[:MAX_TAG_CHARS] if isinstance(key, str) and key.strip() else None
    kind = item.get("kind")
    importance = item.get("importance")
    weight = (
        float(importance) if isinstance(importance, int | float) and not isinstance(importance, bool) else 0.5
    )
    return Fact(
        text=text.strip()[:MAX_FACT_CHARS],
        tags=tags,
        key=key,
        kind=kind if isinstance(kind, str) and kind in FACT_KINDS else "fact",
        importance=min(1.0, max(0.0, weight)) if weight == weight else 0.5,  # NaN -> default
    )
