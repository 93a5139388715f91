"""Structure before similarity: the final order of a recall's hits (pure, no I/O).

Given every candidate scored by the hybrid ranking (:func:`~.ranking.rank`) and the
question's :class:`~.intent.Intent`, :func:`order` puts first the records structure
answers, then fills ``k`` with the rest in hybrid order:

1. for a keyed topic ("which city", 联系方式): the records valid at the recall's time
   whose key tag names the topic — the current value of the fact — best hybrid score
   first (two address keys: the one the question's words match better);
2. for an event topic asked "latest" (最近的投诉) or within a period (上周): the
   matching records, newest ``valid_from`` first (within the period when one is named).

Everything else keeps its hybrid rank. Each hit carries its reason (``""`` for the
hybrid tier) for ``explain=True``.
"""

from __future__ import annotations

from collections.abc import Sequence

from .intent import Intent, structural_match
from .ranking import Scored
from .records import RecallHit

DAY = 86_400.0
#: records that answer a structural topic that go first, at most (the rest of k is hybrid)
MAX_STRUCTURAL = 3


def order(
    scored: Sequence[Scored],
    intent: Intent,
    *,
    ref: float,
    k: int,
    key_tag: str = "key",
    type_tag: str = "type",
    extra: Sequence[Scored] = (),
) -> list[tuple[Scored, str]]:
    """The ``k`` hits, structure's answers first (see the module docstring); ``scored``
    is best first. ``ref`` is the recall's time (``at``, else now). ``extra``: more
    records structure may answer with (the subject's newest), never in the hybrid tier."""
    first: list[tuple[Scored, str]] = []
    hybrid = scored
    scored = [*scored, *extra]
    taken: set[str] = set()
    for topic in intent.keyed:
        for s in scored:
            rec = s.candidate.record
            if rec.id not in taken and structural_match(rec, topic, key_tag, type_tag):
                first.append((s, f"current value of key {rec.tags.get(key_tag)!s:.60}"))
                taken.add(rec.id)
    if intent.latest or intent.period_days:
        since = ref - intent.period_days * DAY if intent.period_days else None
        for topic in intent.events:
            matches = [
                s
                for s in scored
                if s.candidate.record.id not in taken
                and structural_match(s.candidate.record, topic, key_tag, type_tag)
                and (since is None or since <= s.candidate.record.valid_from <= ref)
            ]
            matches.sort(key=lambda s: (-s.candidate.record.valid_from, -s.score))
            what = "newest" if since is None else f"newest within {intent.period_days:g} days"
            for s in matches:
                first.append((s, f"{what} {topic.name}"))
                taken.add(s.candidate.record.id)
    first = first[: min(k, MAX_STRUCTURAL)]
    taken = {s.candidate.record.id for s, _ in first}
    rest = [(s, "") for s in hybrid if s.candidate.record.id not in taken]
    return (first + rest)[:k]


def recall_hits(
    ranked: Sequence[tuple[Scored, str]], intent: Intent, *, explain: bool
) -> tuple[RecallHit, ...]:
    """The hits of :func:`order`'s result; with ``explain``, each with the parts of its rank."""
    return tuple(
        RecallHit(
            record=s.candidate.record,
            score=s.score,
            text_rank=s.candidate.text_rank,
            vector_rank=s.candidate.vector_rank,
            decay=s.decay,
            explain=None
            if not explain
            else {
                "structure": why,
                "tier": 0 if why else 1,
                "text_rank": s.candidate.text_rank,
                "vector_rank": s.candidate.vector_rank,
                "fused": round(s.fused, 6),
                "decay": round(s.decay, 6),
                "importance": round(s.importance, 6),
                "score": round(s.score, 6),
                "intent": intent.explain(),
            },
        )
        for s, why in ranked
    )
