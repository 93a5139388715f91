"""The business dictionary: per-tenant synonym groups, for query expansion and embedding pull.

A group such as ``shipped ≈ dispatched ≈ out for delivery`` is used twice:

* :meth:`Dictionary.expand` adds every member of a group that the query mentions
  to the full-text query, so "shipped" finds a record that says "dispatched";
* :meth:`Dictionary.pull` adds ``weight x`` the normalized group vector (the mean
  of the members' embeddings) to a text's embedding and renormalizes, so records
  and queries that use different members of a group move closer.

The dictionary is data: :func:`load_dictionary` reads JSON, TOML or CSV. It is
bounded (:data:`MAX_GROUPS` groups of :data:`MAX_TERMS` terms).
"""

from __future__ import annotations

import csv
import io
import json
import math
import tomllib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from ..errors import InvalidInput
from .fulltext import CJK_RUN, words

MAX_GROUPS = 10_000
MAX_TERMS = 32
MAX_TERM_WORDS = 6
MAX_TERM_CHARS = 80
DEFAULT_PULL_WEIGHT = 0.3
Vector = tuple[float, ...]


def _norm_term(term: str) -> str:
    return " ".join(words(term))


class Dictionary:
    """The synonym groups of one tenant. Immutable once built."""

    def __init__(self, groups: Iterable[Sequence[str]], *, pull_weight: float = DEFAULT_PULL_WEIGHT):
        built: list[tuple[str, ...]] = []
        index: dict[str, list[int]] = {}
        for raw in groups:
            terms = tuple(dict.fromkeys(t for t in (_norm_term(x) for x in raw) if t))
            if len(terms) < 2:
                raise InvalidInput(f"a synonym group needs two or more terms, got {list(raw)!r:.120}")
            if len(terms) > MAX_TERMS:
                raise InvalidInput(f"a synonym group has at most {MAX_TERMS} terms")
            for t in terms:
                if len(t) > MAX_TERM_CHARS or len(t.split()) > MAX_TERM_WORDS:
                    raise InvalidInput(f"synonym {t!r:.60} is longer than {MAX_TERM_WORDS} words")
                index.setdefault(t, []).append(len(built))
            built.append(terms)
            if len(built) > MAX_GROUPS:
                raise InvalidInput(f"a dictionary has at most {MAX_GROUPS} groups")
        if not 0.0 <= pull_weight <= 10.0:
            raise InvalidInput("pull_weight must be within 0..10")
        self.groups: tuple[tuple[str, ...], ...] = tuple(built)
        self.pull_weight = pull_weight
        self._index = {t: tuple(g) for t, g in index.items()}
        # terms with CJK characters, by their first character: found inside a sentence
        # (Chinese has no spaces between words, so a whole-word match would never fire)
        cjk: dict[str, list[str]] = {}
        for t in index:
            if CJK_RUN.search(t):
                cjk.setdefault(t[0], []).append(t)
        self._cjk = {c: tuple(sorted(ts, key=len, reverse=True)) for c, ts in cjk.items()}
        self._vectors: dict[int, Vector] = {}

    def __len__(self) -> int:
        return len(self.groups)

    def matches(self, text: str) -> list[int]:
        """Indexes of the groups one of whose terms occurs in ``text``: whole words, and
        a CJK term anywhere in a sentence."""
        toks = words(text)
        found: dict[int, None] = {}
        for n in range(1, MAX_TERM_WORDS + 1):
            for i in range(len(toks) - n + 1):
                for g in self._index.get(" ".join(toks[i : i + n]), ()):
                    found[g] = None
        if self._cjk:
            folded = " ".join(toks)
            for i, ch in enumerate(folded):
                for term in self._cjk.get(ch, ()):
                    if folded.startswith(term, i):
                        for g in self._index[term]:
                            found[g] = None
        return list(found)

    def expand(self, text: str) -> list[list[str]]:
        """The synonym groups a query mentions, each as a list of alternative terms."""
        return [list(self.groups[g]) for g in self.matches(text)]

    def group_vector(self, g: int, embed: Callable[[Sequence[str]], list[Vector]]) -> Vector:
        """The normalized mean of group ``g``'s member embeddings (computed once, kept)."""
        vec = self._vectors.get(g)
        if vec is None:
            vecs = embed(self.groups[g])
            vec = normalize([sum(col) for col in zip(*vecs, strict=True)])
            self._vectors[g] = vec
        return vec

    def pull(self, text: str, vector: Vector, embed: Callable[[Sequence[str]], list[Vector]]) -> Vector:
        """``vector`` moved towards the groups ``text`` mentions, renormalized."""
        groups = self.matches(text)
        if not groups or self.pull_weight == 0.0:
            return vector
        out = list(vector)
        for g in groups:
            gv = self.group_vector(g, embed)
            for i, x in enumerate(gv):
                out[i] += self.pull_weight * x
        return normalize(out)


EMPTY = Dictionary(())


def normalize(vec: Sequence[float]) -> Vector:
    """``vec`` scaled to length 1 (a zero vector stays zero)."""
    n = math.sqrt(sum(x * x for x in vec))
    return tuple(vec) if n == 0.0 else tuple(x / n for x in vec)


def parse_dictionary(data: str, fmt: str) -> list[list[str]]:
    """Synonym groups from text in ``json`` (a list of lists, or ``{"groups": [...]}``),
    ``toml`` (``[[group]] terms = [...]``, or ``groups = [[...]]``) or ``csv`` (one group per row)."""
    try:
        if fmt == "json":
            obj = json.loads(data)
            groups = obj.get("groups") if isinstance(obj, dict) else obj
        elif fmt == "toml":
            doc = tomllib.loads(data)
            groups = doc.get("groups") or [g.get("terms") for g in doc.get("group", [])]
        elif fmt == "csv":
            groups = [[c for c in row if c.strip()] for row in csv.reader(io.StringIO(data)) if row]
        else:
            raise InvalidInput(f"unknown dictionary format {fmt!r} (json, toml, csv)")
    except (ValueError, tomllib.TOMLDecodeError, csv.Error) as exc:
        raise InvalidInput(f"cannot parse the {fmt} dictionary: {exc}") from exc
    if not isinstance(groups, list) or not all(
        isinstance(g, list) and all(isinstance(t, str) for t in g) for g in groups
    ):
        raise InvalidInput("a dictionary is a list of groups, each a list of strings")
    return groups


def load_dictionary(path: Path) -> list[list[str]]:
    """Synonym groups from a ``.json``, ``.toml`` or ``.csv`` file."""
    fmt = path.suffix.lower().lstrip(".")
    try:
        data = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from exc
    return parse_dictionary(data, fmt)
