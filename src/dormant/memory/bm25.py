"""BM25 over a handful of documents, in Python: the text ranking of a small scope.

FTS5 ranks by BM25 too, but to answer ``scope AND terms`` it walks the doclists of
the query's terms across every subject in the table before the scope cuts them to
a subject's few rows, so the cost grows with the whole table (measured: 25-50 ms
at 200k records). When the structural filter leaves few rows, the store scores
those rows here instead: the cost is the scope's, not the table's.

Same formula as FTS5 (k1 = 1.2, b = 0.75, ``idf = log((N - n + 0.5) / (n + 0.5))``
floored at 1e-6, summed over the query's phrases present in a document), with one
difference: N, n and the average length are those of the scoped rows, not of the
whole table (a term common in this subject's memories weighs less here).
Tokens come from the caller (the store runs SQLite's own tokenizer, so stemming
and case folding match the index exactly).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

K1 = 1.2
B = 0.75

Tokens = tuple[str, ...]


def occurrences(doc: Sequence[str], phrase: Tokens) -> int:
    """How many times ``phrase`` appears as consecutive tokens of ``doc``."""
    n = len(phrase)
    if n == 0 or n > len(doc):
        return 0
    first = phrase[0]
    if n == 1:  # most query terms are one token
        return doc.count(first)
    return sum(1 for i in range(len(doc) - n + 1) if doc[i] == first and tuple(doc[i : i + n]) == phrase)


def scores(docs: Sequence[Sequence[str]], phrases: Sequence[Tokens]) -> list[float | None]:
    """BM25 of each doc for the phrases OR-ed; None for a doc that contains none of them."""
    phrases = [p for p in dict.fromkeys(phrases) if p]
    if not docs or not phrases:
        return [None] * len(docs)
    tf = [[occurrences(doc, p) for p in phrases] for doc in docs]
    n_docs = len(docs)
    avgdl = max(1.0, sum(len(d) for d in docs) / n_docs)
    idf = []
    for j in range(len(phrases)):
        df = sum(1 for row in tf if row[j])
        idf.append(max(1e-6, math.log((n_docs - df + 0.5) / (df + 0.5))))
    out: list[float | None] = []
    for doc, row in zip(docs, tf, strict=True):
        if not any(row):
            out.append(None)
            continue
        norm = K1 * (1 - B + B * len(doc) / avgdl)
        out.append(sum(idf[j] * f * (K1 + 1) / (f + norm) for j, f in enumerate(row) if f))
    return out
