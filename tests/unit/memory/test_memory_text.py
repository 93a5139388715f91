"""Full-text helpers (CJK pre-split, MATCH building) and the business dictionary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dormant.errors import InvalidInput
from dormant.memory.dictionary import Dictionary, load_dictionary, normalize, parse_dictionary
from dormant.memory.embedder import HashingEmbedder
from dormant.memory.fulltext import index_text, match_expr, query_terms


def test_cjk_runs_become_bigrams() -> None:
    assert index_text("地址 is 北京市") == " 地址  is  北京 京市 "
    assert query_terms("我的配送地址") == ["我的", "的配", "配送", "送地", "地址"]


def test_query_terms_drop_stopwords_and_duplicates() -> None:
    assert query_terms("Where is my order? my ORDER ORD-7892") == ["order", "ord", "7892"]


def test_match_expr_quotes_everything() -> None:
    expr = match_expr([["shipped"], ["out for delivery", 'a"b'], []])
    assert expr == '"shipped" OR ("out for delivery" OR "a""b")'
    assert match_expr([]) is None


def test_dictionary_matches_whole_words_and_phrases() -> None:
    d = Dictionary([["shipped", "dispatched", "Out for Delivery"], ["packed", "boxed"]])
    assert d.matches("Was it SHIPPED yet?") == [0]
    assert d.matches("it is out for delivery now") == [0]
    assert d.matches("unpacked boxes") == []
    assert d.expand("boxed and dispatched") == [
        ["packed", "boxed"],
        ["shipped", "dispatched", "out for delivery"],
    ]


def test_pull_moves_synonyms_closer() -> None:
    emb = HashingEmbedder(256)
    d = Dictionary([["shipped", "dispatched"]], pull_weight=0.3)
    a, b = emb.embed(["parcel shipped", "parcel dispatched"])
    cos = sum(x * y for x, y in zip(a, b, strict=True))
    pa, pb = d.pull("parcel shipped", a, emb.embed), d.pull("parcel dispatched", b, emb.embed)
    assert sum(x * y for x, y in zip(pa, pb, strict=True)) > cos + 0.05
    assert sum(x * x for x in pa) == pytest.approx(1.0)
    assert d.pull("nothing here", a, emb.embed) == a


def test_dictionary_limits() -> None:
    with pytest.raises(InvalidInput):
        Dictionary([["alone"]])
    with pytest.raises(InvalidInput):
        Dictionary([["a", "b c d e f g h"]])
    assert normalize([0.0, 0.0]) == (0.0, 0.0)


def test_formats(tmp_path: Path) -> None:
    groups = [["shipped", "dispatched"], ["packed", "boxed"]]
    assert parse_dictionary(json.dumps({"groups": groups}), "json") == groups
    assert parse_dictionary(json.dumps(groups), "json") == groups
    assert parse_dictionary('[[group]]\nterms = ["shipped", "dispatched"]\n', "toml") == groups[:1]
    assert parse_dictionary("shipped,dispatched\npacked,boxed\n", "csv") == groups
    f = tmp_path / "d.csv"
    f.write_text("a,b\n")
    assert load_dictionary(f) == [["a", "b"]]
    with pytest.raises(InvalidInput):
        parse_dictionary("{", "json")
    with pytest.raises(InvalidInput):
        parse_dictionary("[1, 2]", "json")
    with pytest.raises(InvalidInput):
        load_dictionary(tmp_path / "missing.json")
