"""Text from images at admission with the real Tesseract, and recalled by long-term memory.

An agent with a subject gets a PNG with an invoice number written in it (rendered with
Pillow here): OCR fills the part's text at admission, the slice remembers it as the
subject's memory, and a later question in another thread recalls it, in English and in
Chinese. OCR that times out stores the part without text (never a refusal); the alt
text a client gives is kept; OCR requested without tesseract fails at start-up.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel
from dormant.errors import UsageError
from dormant.memory import HashingEmbedder
from dormant.parts import Image, Text
from dormant.subject import SubjectOptions
from tests.helpers import all_messages
from tests.integration.conftest import fast_settings
from tests.ocr_samples import cjk_font, require_tesseract, text_png

PHONE = "+1 555 0100"
WHO = {"phone": PHONE, "device": "ios-1"}


class Script:
    """Replies "ok" and keeps every request (what the prompt showed)."""

    def __init__(self) -> None:
        self.requests: list[ModelRequest] = []

    def __call__(self, req: ModelRequest) -> ModelReply:
        self.requests.append(req)
        return ModelReply(text="ok")


def runtime(tmp_path: Path, script: Script, **settings: object) -> Runtime:
    agent = Agent(name="desk", model=ScriptedModel(script), subject=SubjectOptions())
    return Runtime(
        f"sqlite:///{tmp_path / 'd.db'}",
        [agent],
        settings=fast_settings(ocr=True, **settings),
        memory_embedder=HashingEmbedder(64),
    )


async def test_the_invoice_number_in_a_photo_is_read_remembered_and_recalled(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    script = Script()
    async with runtime(tmp_path, script) as rt:
        subject = await rt.memory.bind(WHO)
        await rt.memory.add(subject, "prefers to be contacted by email", kind="preference")
        await rt.memory.add(subject, "complained that parcel ORD-1 arrived late", kind="event")
        photo = text_png(["ACME Supplies", "INVOICE INV-48213", "Total 120.00 EUR"])
        await rt.send(
            "t1", parts=[Text("here is the invoice"), Image(photo, name="invoice.png")], identity=WHO
        )
        await rt.run_until_idle(timeout=60)
        (message,) = [m for m in await all_messages(rt.store, "t1") if m.role == "user"]
        (part,) = message.parts
        assert part.text is not None and "INV-48213" in part.text, "OCR filled the part's text"
        assert rt.extractor.stats.ocr_images == 1
        found = await rt.memory.recall([subject], "the invoice number in the photo I sent last week", k=3)
        assert found.hits and "INV-48213" in found.hits[0].record.text
        assert found.hits[0].record.tags["type"] == "attachment"
        assert found.hits[0].record.tags["name"] == "invoice.png"
        # another thread of the same subject: the memory is in the prompt's memories section
        await rt.send("t2", "what was the invoice number in the photo I sent last week?", identity=WHO)
        await rt.run_until_idle(timeout=60)
        assert "INV-48213" in (script.requests[-1].summary or "")


async def test_chinese_text_in_an_image_is_read_and_recalled(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    font = cjk_font()
    script = Script()
    async with runtime(tmp_path, script) as rt:
        subject = await rt.memory.bind(WHO)
        await rt.memory.add(subject, "客户喜欢用邮件联系", kind="preference")
        photo = text_png(["发票号码 FP-7731", "退款申请"], font=font, size=48)
        await rt.send("t1", parts=[Image(photo, name="发票.png")], identity=WHO)
        await rt.run_until_idle(timeout=60)
        (message,) = [m for m in await all_messages(rt.store, "t1") if m.role == "user"]
        text = message.parts[0].text or ""
        assert "FP-7731" in text and "发票号码" in text, text
        found = await rt.memory.recall([subject], "我上周发的照片里的发票号码是多少", k=3)
        assert found.hits and "FP-7731" in found.hits[0].record.text


async def test_the_clients_alt_text_is_kept_and_no_ocr_runs(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    async with runtime(tmp_path, Script()) as rt:
        photo = text_png(["INVOICE INV-48213"])
        await rt.send("t1", parts=[Image(photo, alt="my invoice", name="i.png")], identity=WHO)
        await rt.run_until_idle(timeout=60)
        (message,) = [m for m in await all_messages(rt.store, "t1") if m.role == "user"]
        assert message.parts[0].text == "my invoice"
        assert rt.extractor.stats.ocr_images == 0


async def test_ocr_past_its_timeout_stores_the_part_without_text(tmp_path: Path) -> None:
    require_tesseract("eng", "chi_sim")
    async with runtime(tmp_path, Script(), ocr_timeout_s=0.001) as rt:
        admitted = await rt.send("t1", parts=[Image(text_png(["INVOICE INV-48213"]), name="i.png")])
        assert admitted.input_id
        await rt.run_until_idle(timeout=60)
        (message,) = [m for m in await all_messages(rt.store, "t1") if m.role == "user"]
        assert message.parts[0].text is None and message.parts[0].width > 0
        stats = rt.extractor.stats
        assert stats.ocr_timeouts + stats.ocr_busy == 1 and stats.ocr_images == 0


def test_ocr_requested_without_tesseract_fails_at_start_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no tesseract on it
    with pytest.raises(UsageError, match="tesseract"):
        runtime(tmp_path, Script())
