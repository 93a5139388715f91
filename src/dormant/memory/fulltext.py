"""Pure text handling for the full-text index: CJK pre-split, query terms, MATCH expressions.

SQLite's FTS5 ``unicode61`` tokenizer keeps a run of CJK characters as one
token, so ``配送地址`` would match only itself. Before indexing (and for
queries) each CJK run is rewritten as its overlapping bigrams (``配送 送地 地址``),
the usual trick of CJK search engines; Latin text goes through unchanged and the
``porter`` stemmer folds ``shipped``/``shipping``. (The ``trigram`` tokenizer
also handles CJK but cannot match two-character words, which are most Chinese
words.)
"""

from __future__ import annotations

import re

_CJK = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\uac00-\ud7af"  # hangul syllables
)
CJK_RUN = re.compile(f"[{_CJK}]+")
_CJK_RUN = CJK_RUN
#: a CJK run, or a run of other word characters (a CJK character ends it: ``ORD-1发货``
#: is ``ord``, ``1``, ``发货``, not one word ``1发货`` that matches nothing)
_WORD = re.compile(rf"[{_CJK}]+|[^\W_{_CJK}]+", re.UNICODE)
MAX_QUERY_TERMS = 64
#: Words too common to rank by; they are dropped from queries (never from the index).
_STOP = (
    "a an and are as at be been but by can could did do does for from had has have how i i'm if in "
    "into is it its me my no not of on or our please so than that the their them then there these "
    "they this to was we were what when where which who why will with would you your"
)
STOPWORDS = frozenset(_STOP.split())
#: Chinese question and function bigrams ("whether", "what", "how", "did ... yet"):
#: a Chinese question has no spaces, so they would otherwise be query terms
_CJK_STOP = (
    "有没 没有 是不 不是 什么 怎么 哪个 哪些 哪里 是否 能否 可以 应该 一下 了吗 过吗 的吗 了没 是什 么样 "
    "请问 一个 这个 那个 我们 你们 他们 它们 的是 是的 一次"
)
CJK_STOP = frozenset(_CJK_STOP.split())


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def index_text(text: str) -> str:
    """The text as the index stores it: CJK runs become space-separated bigrams."""
    return _CJK_RUN.sub(lambda m: " " + " ".join(_bigrams(m.group(0))) + " ", text)


def words(text: str) -> list[str]:
    """Case-folded words of ``text``; a CJK run is one word here (dictionary matching)."""
    return [w.casefold() for w in _WORD.findall(text)]


def query_terms(text: str) -> list[str]:
    """The terms a query searches for: words without stopwords, CJK runs as bigrams
    without question bigrams (:data:`CJK_STOP`), each once."""
    out: list[str] = []
    seen: set[str] = set()
    for w in words(text):
        parts = _bigrams(w) if _CJK_RUN.fullmatch(w) else [w]
        for p in parts:
            if p in STOPWORDS or p in CJK_STOP or p in seen:
                continue
            seen.add(p)
            out.append(p)
    return out[:MAX_QUERY_TERMS]


def _quote(term: str) -> str:
    return '"' + index_text(term).strip().replace('"', '""') + '"'


def match_expr(groups: list[list[str]]) -> str | None:
    """An FTS5 MATCH expression: the groups OR-ed, each group's alternatives OR-ed.

    Every term is a quoted phrase, so no user text is ever parsed as FTS syntax.
    ``None`` when there is nothing to search for.
    """
    alts = []
    for group in groups:
        terms = [_quote(t) for t in group if t.strip()]
        if terms:
            alts.append(terms[0] if len(terms) == 1 else "(" + " OR ".join(terms) + ")")
    return " OR ".join(alts) if alts else None


def mostly_cjk(text: str) -> bool:
    """Whether most of ``text``'s letters are CJK characters."""
    cjk = sum(len(m) for m in CJK_RUN.findall(text))
    other = sum(len(w) for w in words(text) if not CJK_RUN.fullmatch(w) and not w.isdigit())
    return cjk > other
