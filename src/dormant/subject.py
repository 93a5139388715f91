"""An agent's subject: whose memory its threads use, and how.

An agent that sets a :class:`SubjectOptions` remembers: each of its threads bound to
a subject (a binding key, set at admission from identity parts: ``send(...,
identity={"phone": ..., "device": ...})``) gets, before each model call, the subject's
top memories and its state registers in the prompt, has the memory tools, and has its
compactions extract durable facts. An agent without one (the default) does none of
this and pays nothing for it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from .errors import UsageError
from .memory.state_events import DEFAULT_PRIORITIES
from .records import Priority

__all__ = ["DEFAULT_TSR_TURNS", "SubjectOptions"]

#: Turns a short-term register entry stays in the thread's state section.
DEFAULT_TSR_TURNS: Final = 3


@dataclass(frozen=True)
class SubjectOptions:
    """How an agent's threads use their subject's memory.

    ``identity`` names the identity parts a thread's subject is bound by (documentation
    and the CLI's prompt; any parts given at admission are accepted). ``long_term``
    names the state keys that are also kept in the subject's long-term register
    (profile) when a thread sets them. ``recall_k`` is how many memories automatic
    recall asks for; ``recall`` False turns automatic recall off (the tools stay).
    ``tsr_turns`` is how many turns a short-term register entry stays shown.
    ``recall_vectors`` False makes automatic recall rank by text and structure only
    (no query embedding, no vector search): measured ~1.7 ms against ~12 ms p50 at
    100,000 memories on SQLite with the hashing embedder (BENCHMARKS.md), at some
    cost in recall of paraphrases. The ``recall`` tool always runs hybrid.
    ``fan_out`` tells the subject's other open threads of each long-term register
    change, as an ``event`` input with the priority ``priorities`` gives the key's class
    (default :data:`dormant.memory.state_events.DEFAULT_PRIORITIES`: complaints, refunds and
    account freezes P0; orders, coupons and addresses P1; browsing P2), so P0 goes first.
    ``remember_parts`` remembers the text of the images and files the user sends (alt
    text, OCR, a PDF's text) as memories of the subject (type ``attachment``), so recall
    finds "the invoice number in the photo I sent"; False leaves them in the thread only.
    """

    identity: tuple[str, ...] = ("phone", "device")
    long_term: frozenset[str] = frozenset()
    recall: bool = True
    recall_k: int = 5
    recall_vectors: bool = True
    tsr_turns: int = DEFAULT_TSR_TURNS
    fan_out: bool = True
    remember_parts: bool = True
    priorities: Mapping[str, Priority] = field(default_factory=lambda: dict(DEFAULT_PRIORITIES), hash=False)

    def __post_init__(self) -> None:
        if not 1 <= self.recall_k <= 50:
            raise UsageError("recall_k must be within 1..50")
        if not 1 <= self.tsr_turns <= 100:
            raise UsageError("tsr_turns must be within 1..100")
        object.__setattr__(self, "long_term", frozenset(self.long_term))
        try:
            priorities = {str(k): Priority(v) for k, v in self.priorities.items()}
        except ValueError as exc:
            raise UsageError(f"priorities map state keys to P0, P1 or P2: {exc}") from None
        object.__setattr__(self, "priorities", priorities)
