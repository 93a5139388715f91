"""The extractors' bounds: OCR's timeout, RAM limit, concurrency, a missing binary or
language, a bad image; the PDF child's time and RAM limits. The OCR ones run the real
tesseract (skipped without it, failed under CI=true) or a stand-in script."""

from __future__ import annotations

import asyncio
import os
import stat
import time
from pathlib import Path

import pytest

from dormant.config import Settings
from dormant.errors import Overloaded, PayloadTooLarge, UnsupportedMedia, UsageError
from dormant.parts import Limits, extract
from dormant.parts.extract import Extractor, clean_text, pdf_text
from tests.media_samples import pdf
from tests.ocr_samples import require_tesseract, text_png

INVOICE = ["INVOICE INV-48213"]


def slow_tesseract(tmp_path: Path, seconds: float = 30) -> str:
    """A stand-in for tesseract: lists English, then sleeps instead of reading."""
    script = tmp_path / "tesseract"
    script.write_text(
        f'#!/bin/sh\nif [ "$1" = "--list-langs" ]; then echo eng; exit 0; fi\nexec sleep {seconds}\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_the_real_tesseract_reads_an_invoice_number() -> None:
    require_tesseract("eng", "chi_sim")
    ocr = Extractor()
    text = ocr.read(text_png(INVOICE))
    assert text is not None and "INV-48213" in text
    assert ocr.stats.ocr_images == 1 and ocr.stats.ocr_failures == 0


async def test_a_timeout_kills_tesseract_and_leaves_no_text(tmp_path: Path) -> None:
    ocr = Extractor(binary=slow_tesseract(tmp_path), languages="eng", timeout_s=0.3)
    started = time.monotonic()
    text = await ocr.image_text(text_png(INVOICE))
    assert time.monotonic() - started < 5  # killed, not waited for (it sleeps 30 s)
    assert text is None
    assert ocr.stats.ocr_timeouts == 1
    assert ocr.stats.last_problem.startswith("timeout")


async def test_an_image_waiting_past_its_timeout_for_a_turn_is_not_read(tmp_path: Path) -> None:
    ocr = Extractor(binary=slow_tesseract(tmp_path), languages="eng", timeout_s=0.4, concurrency=1)
    image = text_png(INVOICE)
    results = await asyncio.gather(ocr.image_text(image), ocr.image_text(image))
    assert list(results) == [None, None]
    assert (ocr.stats.ocr_timeouts, ocr.stats.ocr_busy) == (1, 1)


def test_the_ram_limit_makes_tesseract_fail_not_the_process() -> None:
    require_tesseract("eng", "chi_sim")
    image = text_png(INVOICE)
    tight = Extractor(memory_bytes=100 * 1024 * 1024)
    assert tight.read(image) is None
    assert tight.stats.ocr_failures == 1 and tight.stats.last_problem.startswith("failed")
    roomy = Extractor(memory_bytes=512 * 1024 * 1024)
    assert "INV-48213" in (roomy.read(image) or "")


def test_a_missing_binary_is_refused_when_the_extractor_is_made(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not installed"):
        Extractor(binary=str(tmp_path / "no-tesseract"))
    with pytest.raises(UsageError, match="not installed"):
        Extractor(binary="no-such-tesseract-binary")
    off = Extractor.of(Settings.build(ocr=False))  # OCR off: nothing is checked
    assert not off.ocr


def test_a_missing_language_is_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="klingon"):
        Extractor(binary=slow_tesseract(tmp_path), languages="eng+klingon")


def test_a_bad_image_gives_no_text_and_is_counted() -> None:
    require_tesseract("eng")
    ocr = Extractor(languages="eng")
    assert ocr.read(b"\x89PNG\r\n\x1a\n not really") is None
    assert ocr.read(text_png(INVOICE)[:200]) is None  # truncated
    assert ocr.stats.ocr_failures == 2 and ocr.stats.last_problem.startswith("bad_image")


async def test_without_ocr_no_image_is_read() -> None:
    off = Extractor(ocr=False, binary="no-such-tesseract-binary")
    assert await off.image_text(text_png(INVOICE)) is None
    assert off.stats.ocr_images == 0


def test_cjk_characters_spaced_by_tesseract_are_joined() -> None:
    assert clean_text("发 票 号 码 FP-7731 退 款 申请\n\n\f") == "发票号码 FP-7731 退款申请"
    assert clean_text("  \n\f ") is None


def test_pdf_text_comes_from_a_child_process() -> None:
    found = pdf_text(pdf("Invoice 4711"), Limits())
    assert found.text == "Invoice 4711" and found.pages == 1 and found.problem is None
    with pytest.raises(PayloadTooLarge):
        pdf_text(pdf("x", pages=5), Limits(pdf_pages=4))
    with pytest.raises(UnsupportedMedia, match="cannot be read"):
        pdf_text(b"%PDF-1.4\nnot a pdf at all", Limits())


def test_a_pdf_whose_pages_are_not_counted_in_time_or_ram_is_refused() -> None:
    with pytest.raises(UnsupportedMedia, match="not read within"):
        pdf_text(pdf("Invoice 4711"), Limits(pdf_timeout_s=0.01))
    with pytest.raises(UnsupportedMedia, match="RAM limit"):
        pdf_text(pdf("Invoice 4711"), Limits(child_memory_bytes=8 * 1024 * 1024))


def test_a_pdf_killed_after_its_pages_were_counted_is_kept_without_text(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    child = tmp_path / "slow_child.py"
    child.write_text("import sys, time\nprint('{\"pages\": 3}', flush=True)\ntime.sleep(30)\n")
    monkeypatch.setattr(extract, "_CHILD", child)
    found = pdf_text(pdf("Invoice 4711"), Limits(pdf_timeout_s=1.0))
    assert (found.text, found.pages) == (None, 3)
    assert found.problem is not None and "not read within" in found.problem


def test_pdf_children_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    slots = extract._pdf_slots
    for _ in range(extract.PDF_CHILDREN):
        assert slots.acquire(timeout=1)
    try:
        with pytest.raises(Overloaded):
            pdf_text(pdf("x"), Limits(pdf_timeout_s=0.1))
    finally:
        for _ in range(extract.PDF_CHILDREN):
            slots.release()
    assert os.path.exists(extract._CHILD)
