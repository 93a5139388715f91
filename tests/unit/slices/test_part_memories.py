"""The text of the parts a user sends, as memories of the subject (pure)."""

from __future__ import annotations

from dormant.memory.intent import read_intent
from dormant.records import Input, Part, Priority
from dormant.slices.memory import PART_CHUNKS, SLICE_PART_MEMORIES, part_memories

REF = "sha256:" + "ab" * 32


def user(parts: tuple[Part, ...], kind: str = "user", at: float = 1_700_000_000.0) -> Input:
    return Input(
        id=1,
        thread_id="t",
        kind=kind,  # type: ignore[arg-type]
        dedup_key="k",
        content="see attached",
        priority=Priority.P1,
        not_before=0.0,
        admitted_at=at,
        parts=parts,
    )


def image(text: str | None, name: str | None = "invoice.png") -> Part:
    return Part(
        kind="image", ref=REF, media_type="image/png", size=10, width=4, height=4, name=name, text=text
    )


def test_a_part_with_text_becomes_an_attachment_event_valid_from_its_admission() -> None:
    (memory,) = part_memories([user((image("INVOICE INV-48213"), image(None)))], "b2_s", "t", "desk")
    assert memory.text == "Photo or image invoice.png the user sent: INVOICE INV-48213"
    assert memory.kind == "event" and memory.subject == "b2_s"
    assert memory.tags == {"type": "attachment", "part": "image", "blob": REF, "name": "invoice.png"}
    assert memory.valid_from == 1_700_000_000.0 and memory.thread == "t" and memory.agent == "desk"


def test_a_long_text_is_chunked_and_bounded() -> None:
    pdf = Part(kind="file", ref=REF, media_type="application/pdf", size=10, name="a.pdf", text="word " * 5000)
    found = part_memories([user((pdf,))], "b2_s", "t", "desk")
    assert len(found) == PART_CHUNKS
    assert [m.tags["chunk"] for m in found] == list(range(PART_CHUNKS))
    assert all(m.text.startswith("File a.pdf (application/pdf) the user sent: ") for m in found)
    many = [user(tuple(image(f"text {i}", name=None) for i in range(16))) for _ in range(4)]
    assert len(part_memories(many, "b2_s", "t", "desk")) == SLICE_PART_MEMORIES


def test_only_user_inputs_count() -> None:
    assert part_memories([user((image("x"),), kind="event")], "b2_s", "t", "desk") == []


def test_a_question_about_a_photo_last_week_asks_for_attachments() -> None:
    intent = read_intent("what was the invoice number in the photo I sent last week?")
    assert "attachment" in [t.name for t in intent.topics] and intent.period_days is not None
    assert "attachment" in [t.name for t in read_intent("我上周发的截图").topics]
