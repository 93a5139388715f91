"""Images with text in them, rendered with Pillow at test time, and the real Tesseract.

The OCR tests need the Debian ``tesseract-ocr`` package with its English and Simplified
Chinese data, and a CJK font for the Chinese sample (``fonts-wqy-microhei``); ``.ci/run``
installs them. Without them a test skips with the reason, except under ``CI=true``,
where it fails: CI must run them.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess

import pytest
from PIL import Image as PILImage
from PIL import ImageDraw, ImageFont

LATIN_FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the OCR tests must run)", pytrace=False)
    pytest.skip(reason)


def require_tesseract(*languages: str) -> None:
    """Skip (fail under CI=true) unless tesseract and ``languages`` are installed."""
    binary = shutil.which("tesseract")
    if binary is None:
        _missing("tesseract is not installed (apt-get install tesseract-ocr tesseract-ocr-chi-sim)")
        return
    listed = subprocess.run([binary, "--list-langs"], capture_output=True, check=False, timeout=30)
    have = set((listed.stdout + listed.stderr).decode().split())
    lacking = [lang for lang in languages if lang not in have]
    if lacking:
        _missing(f"tesseract lacks the language data {lacking}")


def cjk_font() -> str:
    """A font file that has Chinese glyphs (``fc-list :lang=zh``); skips (fails under
    CI=true) when the machine has none."""
    found = ""
    if shutil.which("fc-list"):
        listed = subprocess.run(
            ["fc-list", ":lang=zh", "file"], capture_output=True, check=False, timeout=30
        ).stdout.decode()
        found = next((line.split(":")[0].strip() for line in listed.splitlines() if line.strip()), "")
    if not found:
        _missing("no CJK font on this machine (apt-get install fonts-wqy-microhei)")
    return found


def text_png(lines: list[str], font: str = LATIN_FONT, size: int = 40, width: int = 1000) -> bytes:
    """A white PNG with ``lines`` written in black."""
    face = ImageFont.truetype(font, size)
    img = PILImage.new("RGB", (width, 60 + len(lines) * (size + 24)), "white")
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((30, 30 + i * (size + 24)), line, font=face, fill="black")
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()
