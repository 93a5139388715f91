"""Counting in a model's own tokens: a Hugging Face tokenizer.json, or the server's /tokenize."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from dormant.errors import UsageError
from dormant.tokens import (
    FILE_PREFIX,
    SERVER_CACHE_ENTRIES,
    ServerEncoder,
    TokenCounter,
    check_encoding,
    encoding,
    tokenizer_encoding,
)
from tests.openai_server import Reply, ScriptServer, server

__all__ = ["server"]  # a fixture, used by name


def word_tokenizer(path: Path) -> Path:
    """A tokenizer.json that makes one token of each whitespace-separated word."""
    vocab = {"[UNK]": 0, "hello": 1, "world": 2}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path


def test_a_tokenizer_json_counts_in_the_model_s_own_tokens(tmp_path: Path) -> None:
    path = word_tokenizer(tmp_path / "tokenizer.json")
    name = tokenizer_encoding(str(path))
    assert name == FILE_PREFIX + str(path.resolve())
    counter = TokenCounter(name)
    assert counter.text("hello world hello unknownword") == 4
    assert counter.text("") == 0
    assert counter.count("user", "hello world") == 3 + 1 + 2  # framing, role, content


def test_tokenizer_choices(tmp_path: Path) -> None:
    assert tokenizer_encoding("auto") is None and tokenizer_encoding("") is None
    assert tokenizer_encoding("cl100k_base") == "cl100k_base"
    assert tokenizer_encoding("server", "http://127.0.0.1:9/v1/") == "server:http://127.0.0.1:9/v1"
    with pytest.raises(UsageError, match="base-url"):
        tokenizer_encoding("server")
    with pytest.raises(UsageError, match="no tokenizer file"):
        tokenizer_encoding(str(tmp_path / "missing.json"))
    with pytest.raises(UsageError, match="unknown token encoding"):
        tokenizer_encoding("p50k_base")
    with pytest.raises(UsageError, match="unknown token encoding"):
        check_encoding("server:ftp://x")


def test_a_broken_tokenizer_file_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="cannot read the tokenizer file"):
        TokenCounter(FILE_PREFIX + str(bad))


async def test_the_server_counts_once_asked_and_the_byte_bound_stands_in_before(
    server: ScriptServer,
) -> None:
    encoder = ServerEncoder(server.base_url)
    text = "Привет мир"
    assert encoder.count(text) == len(text.encode()), "unasked: the UTF-8 bound"
    server.script(
        Reply(
            headers={"Content-Type": "application/json"}, chunks=[json.dumps({"tokens": [1, 2, 3]}).encode()]
        )
    )
    assert await encoder.fill([text, ""]) == 1
    assert encoder.count(text) == 3
    assert server.received[0].path == "/tokenize", "llama.cpp serves /tokenize at the root"
    assert server.received[0].body["content"] == text
    assert await encoder.fill([text]) == 0, "known counts are not asked again"


async def test_a_failing_tokenize_endpoint_leaves_the_bound(server: ScriptServer) -> None:
    encoder = ServerEncoder(server.base_url)
    server.script(Reply(status=404, chunks=[b"{}"]))
    assert await encoder.fill(["hello"]) == 0
    assert encoder.count("hello") == 5 and encoder.failures == 1


def test_a_server_encoding_is_one_per_url_and_bounded() -> None:
    name = "server:http://127.0.0.1:1/v1"
    assert encoding(name) is encoding(name)
    assert SERVER_CACHE_ENTRIES <= 4096
