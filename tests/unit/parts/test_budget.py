"""The budget rule with images and files: a view of random messages with random parts,
as the OpenAI adapter sends it, never costs more than the view's token budget when
counted independently (tiktoken for text, OpenAI's tile rule recomputed here), whether
the view was extended or built from the store, and however many of its oldest parts a
full view shows as their text and facts."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from dormant.models.base import OPENAI_CHAT, ModelRequest
from dormant.models.openai import OpenAIChatModel
from dormant.records import Message, Part, Role, Thread, ViewLimits
from dormant.tokens import encoding
from dormant.view.builder import build_view, extend_view, with_count

ENC = encoding("o200k_base")
VISION = OpenAIChatModel(model="gpt-4o", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="openai")
TEXT_ONLY = OpenAIChatModel(model="m", base_url="http://127.0.0.1:9/v1", api_key="x", dialect="generic")


def tokens(text: str) -> int:
    return len(ENC.encode_ordinary(text)) if text else 0


def tiles(width: int, height: int) -> int:
    """OpenAI's high-detail image cost, written out again independently of dormant."""
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        w, h = w * 2048 / max(w, h), h * 2048 / max(width, height)
    if min(w, h) > 768:
        f = 768 / min(w, h)
        w, h = w * f, h * f
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def server_count(model: OpenAIChatModel, request: ModelRequest) -> int:
    total = OPENAI_CHAT.reply
    for message in model.request_body(request)["messages"]:
        total += OPENAI_CHAT.message + tokens(message["role"])
        content = message.get("content") or ""
        if isinstance(content, str):
            total += tokens(content)
            continue
        for item in content:
            if item["type"] == "text":
                total += tokens(item["text"])
            elif item["type"] == "image_url":
                total += tiles(*SIZES[item["image_url"]["url"]])
            else:  # a file part: its text, as the server extracts it
                total += tokens(TEXTS[item["file"]["file_data"]])
    return total


SIZES: dict[str, tuple[int, int]] = {}
TEXTS: dict[str, str] = {}

words = st.lists(
    st.sampled_from(["alpha", "数据", "🙂", "invoice", "No", "4711", "\n", "naïve"]), max_size=60
)
image = st.builds(
    lambda n, w, h: Part(
        kind="image", ref=f"sha256:{n:064x}", media_type="image/png", size=9, width=w, height=h
    ),
    st.integers(0, 10**6),
    st.integers(1, 6000),
    st.integers(1, 6000),
)
file = st.builds(
    lambda n, t: Part(
        kind="file",
        ref=f"sha256:{n:064x}",
        media_type="application/pdf",
        size=99,
        name="i.pdf",
        text=" ".join(t),
    ),
    st.integers(0, 10**6),
    words,
)
message = st.tuples(words, st.lists(st.one_of(image, file), max_size=4))


@settings(max_examples=60, deadline=None)
@given(st.lists(message, min_size=1, max_size=20), st.integers(500, 8000))
def test_no_request_with_parts_is_over_the_budget(
    drawn: list[tuple[list[str], list[Part]]], budget: int
) -> None:
    history = []
    for seq, (text, parts) in enumerate(drawn, 1):
        for p in parts:
            SIZES[p.ref] = (p.width, p.height)
            TEXTS[p.ref] = p.text or ""
        role: Role = "user" if seq % 2 else "assistant"
        shown = tuple(parts) if role == "user" else ()
        history.append(
            with_count(Message(seq=seq, role=role, content=" ".join(text), parts=shown), "o200k_base")
        )
    limits = ViewLimits(max_tokens=budget, max_messages=64, max_bytes=10**7)
    thread = Thread(id="t", agent="a", last_seq=len(history))

    def fetch(thread_id: str, max_seq: int, min_seq: int, limit: int) -> list[Message]:
        return [m for m in reversed(history) if min_seq < m.seq <= max_seq][:limit]

    # extended in one go, and built from the store (a full view shows its oldest parts as text)
    built, _ = build_view(thread, limits, fetch, lambda _: None)
    for view in (extend_view((), history, limits), built):
        request = ModelRequest(thread_id="t", system="", messages=view)
        for model in (VISION, TEXT_ONLY):
            assert server_count(model, request) <= budget + OPENAI_CHAT.reply
