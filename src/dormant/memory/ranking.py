"""Pure ranking rules of recall: the structural filter, fusion, time decay, importance, supersession.

Nothing here does I/O. A backend returns candidates (records plus their rank in
the full-text list and in the vector list); :func:`rank` turns them into the
final order:

``score = fusion(text rank, vector rank) * decay(age) * importance multiplier``

* **Fusion** is reciprocal-rank fusion by default (``Σ 2w/(k + rank)``, each list's
  weight w = 0.5, k = 1): it needs no score normalization, so a bm25 value and a
  cosine distance never have to be put on one scale. k = 1 rather than the usual
  60 because the fused score is multiplied by decay: at k = 60 ranks 1..10 differ
  by ~15 %, so any decay that spans more than that overrides relevance; at k = 1
  rank 1 scores 5.5x rank 10 and a small λ only reorders near-ties (measured in
  BENCHMARKS.md). ``"weighted"`` (min-max normalized bm25 and cosine similarity,
  weighted) is the alternative.
* **Decay** is ``1 / (1 + λ·hours)``, λ per kind (:attr:`RankingPolicy.lambdas`),
  default 0.0001 (:data:`DEFAULT_LAMBDA`). The hours run from the record's creation
  by default (``decay_from="created"``): a record that is recalled often should not
  look younger than it is, and the benchmark measures both.
* **Importance** (0..1, default 0.5) multiplies by ``1 + weight·(importance - 0.5)``.
* **Supersession**: a new record with the same subject, kind and key tag value
  invalidates the older valid one, unless the kind's rule forbids it (a
  complaint is never superseded by an inquiry).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ..errors import InvalidInput
from .records import MEMORY_KINDS, MemoryKind, MemoryRecord, NewMemory, TagValue

Fusion = Literal["rrf", "weighted"]
DecayFrom = Literal["created", "access"]
TAG_KEY_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_TAGS = 32
MAX_TAG_VALUE_CHARS = 256
#: λ per hour. 0.001 lifted the newest of similar events when ranking alone had to
#: answer "the last call"; now that structure answers "latest" questions first
#: (:mod:`~dormant.memory.structure`), 0.0001 (half-weight after ~14 months) keeps
#: relevance ahead of age: recall@1 0.91 -> 0.99 on the bench (BENCHMARKS.md).
DEFAULT_LAMBDA = 0.0001
#: the reciprocal-rank constant (see the module docstring)
DEFAULT_RRF_K = 1.0


def check_tags(tags: Mapping[str, TagValue]) -> dict[str, TagValue]:
    """Validate typed tags (keys are identifiers: they become JSON paths in SQL)."""
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags, got {len(tags)}")
    for key, value in tags.items():
        if not isinstance(key, str) or not TAG_KEY_RE.match(key):
            raise InvalidInput(f"tag key {key!r} must match {TAG_KEY_RE.pattern}")
        if not isinstance(value, str | int | float | bool):
            raise InvalidInput(f"tag {key!r}: value must be str, int, float or bool")
        if isinstance(value, str) and len(value) > MAX_TAG_VALUE_CHARS:
            raise InvalidInput(f"tag {key!r}: value longer than {MAX_TAG_VALUE_CHARS} chars")
    return dict(tags)


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterSpec:
    """The structural filter, applied in SQL before anything is ranked.

    ``at=None`` means "valid now"; ``history=True`` keeps superseded and forgotten
    records too. ``tags`` match exactly (typed).
    """

    kinds: frozenset[MemoryKind] = frozenset()
    tags: Mapping[str, TagValue] = field(default_factory=dict)
    at: float | None = None
    history: bool = False

    def __post_init__(self) -> None:
        bad = set(self.kinds) - MEMORY_KINDS
        if bad:
            raise InvalidInput(f"unknown memory kinds: {sorted(bad)}")
        check_tags(self.tags)

    def admits(self, record: MemoryRecord, now: float) -> bool:
        """The same filter in Python (tests pin the SQL of each backend against it)."""
        if self.kinds and record.kind not in self.kinds:
            return False
        for key, value in self.tags.items():
            got = record.tags.get(key)
            if got is None or type(got) is not type(value) or got != value:
                return False
        if self.history:
            return True
        return record.valid_at(self.at if self.at is not None else now)


def decay(hours: float, lam: float) -> float:
    """``1 / (1 + λ·hours)``; a negative age (clock skew) counts as zero."""
    return 1.0 / (1.0 + lam * max(0.0, hours))


@dataclass(frozen=True, slots=True, kw_only=True)
class RankingPolicy:
    """How candidates are scored. Every field is measured in BENCHMARKS.md."""

    fusion: Fusion = "rrf"
    rrf_k: float = DEFAULT_RRF_K
    text_weight: float = 0.5
    vector_weight: float = 0.5
    lambdas: Mapping[str, float] = field(default_factory=dict)
    default_lambda: float = DEFAULT_LAMBDA
    decay_from: DecayFrom = "created"
    importance_weight: float = 1.0
    use_decay: bool = True

    def lam(self, kind: str) -> float:
        """λ of one kind."""
        return self.lambdas.get(kind, self.default_lambda)

    def age_hours(self, record: MemoryRecord, now: float) -> float:
        """Hours since creation, or since the last access when ``decay_from="access"``."""
        start = record.created_at
        if self.decay_from == "access" and record.last_access_at is not None:
            start = max(start, record.last_access_at)
        return (now - start) / 3600.0

    def importance(self, record: MemoryRecord) -> float:
        """The importance multiplier, ``1 + weight·(importance - 0.5)``, never below 0."""
        return max(0.0, 1.0 + self.importance_weight * (record.importance - 0.5))


@dataclass(frozen=True, slots=True)
class Candidate:
    """A record the backend found, with its 1-based position in each list (None: not in it).

    ``text_score`` is the backend's text relevance, larger is better; ``vector_sim``
    the cosine similarity.
    """

    record: MemoryRecord
    text_rank: int | None = None
    text_score: float = 0.0
    vector_rank: int | None = None
    vector_sim: float = 0.0


@dataclass(frozen=True, slots=True)
class Scored:
    """A candidate with its final score and decay factor."""

    candidate: Candidate
    score: float
    decay: float
    #: the fused relevance (1.0 for a candidate in neither list) and the importance multiplier
    fused: float = 1.0
    importance: float = 1.0


def _fused(cands: Sequence[Candidate], policy: RankingPolicy) -> list[float]:
    if policy.fusion == "rrf":
        k = policy.rrf_k
        # each list weighs 2 x its weight: the default 0.5 / 0.5 is plain RRF
        wt, wv = 2.0 * policy.text_weight, 2.0 * policy.vector_weight
        return [
            (wt / (k + c.text_rank) if c.text_rank is not None else 0.0)
            + (wv / (k + c.vector_rank) if c.vector_rank is not None else 0.0)
            for c in cands
        ]
    texts = [c.text_score for c in cands if c.text_rank is not None]
    lo, hi = (min(texts), max(texts)) if texts else (0.0, 0.0)
    out = []
    for c in cands:
        t = 0.0
        if c.text_rank is not None:
            t = 1.0 if hi == lo else (c.text_score - lo) / (hi - lo)
        v = max(0.0, c.vector_sim) if c.vector_rank is not None else 0.0
        out.append(policy.text_weight * t + policy.vector_weight * v)
    return out


def rank(cands: Sequence[Candidate], policy: RankingPolicy, *, now: float, k: int) -> list[Scored]:
    """The ``k`` best candidates, best first; ties go to the newer record, then the id.

    A candidate in neither list (structure only: no query text and no vector) scores
    by decay and importance alone, so an empty query returns the most recent first.
    """
    fused = _fused(cands, policy)
    scored = []
    for c, f in zip(cands, fused, strict=True):
        base = f if (c.text_rank is not None or c.vector_rank is not None) else 1.0
        d = decay(policy.age_hours(c.record, now), policy.lam(c.record.kind)) if policy.use_decay else 1.0
        imp = policy.importance(c.record)
        scored.append(Scored(c, base * d * imp, d, base, imp))
    scored.sort(key=lambda s: (-s.score, -s.candidate.record.created_at, s.candidate.record.id))
    return scored[:k]


@dataclass(frozen=True, slots=True, kw_only=True)
class SupersessionRules:
    """When a new record invalidates older ones.

    ``key_tag``: records of one subject and kind with the same value of this tag are
    versions of one fact. ``by_kind``: whether key supersession applies to a kind
    (events are history: off). ``protected``: (old type, new type) pairs, by the
    ``type_tag``, that never supersede — a complaint stays valid after an inquiry
    about the same order.
    """

    key_tag: str = "key"
    type_tag: str = "type"
    by_kind: Mapping[str, bool] = field(
        default_factory=lambda: {
            "fact": True,
            "preference": True,
            "profile": True,
            "knowledge": True,
            "event": False,
        }
    )
    protected: frozenset[tuple[str, str]] = frozenset({("complaint", "inquiry"), ("complaint", "question")})

    def key_of(self, kind: str, tags: Mapping[str, TagValue]) -> str | None:
        """The supersession key of a record (``None``: it supersedes nothing by key)."""
        if not self.by_kind.get(kind, False):
            return None
        value = tags.get(self.key_tag)
        return None if value is None else f"{type(value).__name__}:{value}"

    def supersedes(self, old: MemoryRecord, new: NewMemory) -> bool:
        """Whether ``new`` is a version of the same fact as ``old`` that may supersede it
        (same subject is the caller's business; which of the two is newer, by
        ``valid_from``, is the core's)."""
        if old.id in new.replaces:
            return True
        if old.kind != new.kind:
            return False
        key = self.key_of(new.kind, new.tags)
        if key is None or key != self.key_of(old.kind, old.tags):
            return False
        pair = (str(old.tags.get(self.type_tag, "")), str(new.tags.get(self.type_tag, "")))
        return pair not in self.protected
