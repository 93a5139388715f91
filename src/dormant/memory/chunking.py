"""Knowledge documents cut into chunks that fit one memory record (pure)."""

from __future__ import annotations

import re

DEFAULT_CHUNK_CHARS = 1_200
_SENTENCE = re.compile("(?<=[.!?])\\s+|(?<=[\u3002\uff01\uff1f])")


def _pieces(paragraph: str, max_chars: int) -> list[str]:
    if len(paragraph) <= max_chars:
        return [paragraph]
    out: list[str] = []
    for sentence in _SENTENCE.split(paragraph):
        while len(sentence) > max_chars:
            out.append(sentence[:max_chars])
            sentence = sentence[max_chars:]
        out.append(sentence)
    return out


def chunk_text(text: str, max_chars: int = DEFAULT_CHUNK_CHARS) -> list[str]:
    """Paragraphs packed into chunks of at most ``max_chars``; a longer paragraph is cut at
    sentence ends (a longer sentence, at ``max_chars``). Whitespace-only input gives no chunk."""
    if max_chars < 50:
        raise ValueError("max_chars must be at least 50")
    chunks: list[str] = []
    current = ""
    for para in (p.strip() for p in re.split(r"\n\s*\n", text)):
        if not para:
            continue
        for piece in _pieces(" ".join(para.split()), max_chars):
            if current and len(current) + 1 + len(piece) > max_chars:
                chunks.append(current)
                current = ""
            current = f"{current}\n{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks
