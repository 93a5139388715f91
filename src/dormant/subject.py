"""An agent's subject: whose memory its threads use, and how (issue 16).

An agent that sets a :class:`SubjectOptions` remembers: each of its threads bound to
a subject (a binding key, set at admission from identity parts: ``send(...,
identity={"phone": ..., "device": ...})``) gets, before each model call, the subject's
top memories and its state registers in the prompt, has the memory tools, and has its
compactions extract durable facts. An agent without one (the default) does none of
this and pays nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .errors import UsageError

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
    """

    identity: tuple[str, ...] = ("phone", "device")
    long_term: frozenset[str] = frozenset()
    recall: bool = True
    recall_k: int = 5
    recall_vectors: bool = True
    tsr_turns: int = DEFAULT_TSR_TURNS

    def __post_init__(self) -> None:
        if not 1 <= self.recall_k <= 50:
            raise UsageError("recall_k must be within 1..50")
        if not 1 <= self.tsr_turns <= 100:
            raise UsageError("tsr_turns must be within 1..100")
        object.__setattr__(self, "long_term", frozenset(self.long_term))
