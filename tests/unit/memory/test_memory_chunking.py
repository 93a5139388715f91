"""Knowledge chunking."""

from __future__ import annotations

import pytest

from dormant.memory.chunking import chunk_text


def test_paragraphs_are_packed_and_long_ones_cut_at_sentences() -> None:
    text = "First para.\n\nSecond para.\n\n" + "A sentence here. " * 20 + "\n\n" + "x" * 130
    chunks = chunk_text(text, 100)
    assert chunks[0].startswith("First para.\nSecond para.\nA sentence here.")
    assert all(len(c) <= 100 for c in chunks)
    assert "".join(chunks).count("A sentence here.") == 20
    assert chunks[-1] == "x" * 30
    assert chunk_text("  \n\n ") == []
    assert chunk_text("中文句子。第二句\uff01" * 10, 60)[0].endswith("。")
    with pytest.raises(ValueError):
        chunk_text("x", 10)
