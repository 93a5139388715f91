"""Text on its way to the store: NUL and lone surrogates never reach it,
and truncate() never raises."""

from __future__ import annotations

import pytest

from dormant.records import NewInput
from dormant.store.sqlite import SQLiteStore
from dormant.text import REPLACEMENT, clean, truncate
from dormant.tools.blobs import stored_output

LISTDIR_NAME = b"caf\xe9.txt".decode("utf-8", "surrogateescape")  # as os.listdir gives it


def test_clean_removes_nul_and_replaces_lone_surrogates() -> None:
    assert clean("a\x00b") == "ab"
    assert clean(LISTDIR_NAME) == f"caf{REPLACEMENT}.txt"
    assert clean("\ud800 and \udfff\x00") == f"{REPLACEMENT} and {REPLACEMENT}"
    clean(LISTDIR_NAME).encode()  # encodable now


def test_clean_returns_clean_text_itself() -> None:
    for text in ("plain", "é ✓ 😀", ""):
        assert clean(text) is text


def test_truncate_never_raises_on_lone_surrogates() -> None:
    assert truncate(LISTDIR_NAME, 1000) == f"caf{REPLACEMENT}.txt"
    long = LISTDIR_NAME * 500
    cut = truncate(long, 1000)
    assert len(cut.encode()) <= 1000 and "output truncated" in cut


def test_truncate_removes_nul_too() -> None:
    assert truncate("a\x00" * 10, 1000) == "a" * 10


@pytest.mark.parametrize("threshold", [1024, 16])
async def test_stored_output_is_clean_whether_inline_or_a_blob(threshold: int) -> None:
    store = SQLiteStore("memory://")
    await store.open()
    try:
        await store.admit([NewInput(thread_id="t1", kind="user", dedup_key="k", content="x", agent="a")])
        text = await stored_output(store, "t1", f"files: {LISTDIR_NAME}\x00 end" * 4, threshold)
        assert "\x00" not in text
        text.encode()
        raw = await stored_output(store, "t1", b"bytes\x00with nul" * 4, threshold)
        assert "\x00" not in raw
    finally:
        await store.close()
