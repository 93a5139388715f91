"""What text extraction costs at admission: OCR of images and a PDF's text, medians of runs.

``python -m dormant.bench.ocr [RUNS]`` renders a one-line image ("INVOICE INV-48213")
and a 2048 x 2048 page of 40 lines with Pillow, reads each with the real ``tesseract``
(``eng`` and ``eng+chi_sim``) through :class:`dormant.parts.Extractor`, and reads a
one-page PDF's text through its child process; prints the median seconds of ``RUNS``
(5) runs, the largest child's peak RSS, and whether the text was found. Needs the Debian
``tesseract-ocr``, ``-eng`` and ``-chi-sim`` packages.
"""

from __future__ import annotations

import functools
import io
import resource
import statistics
import sys
import time
from collections.abc import Callable

from ..parts import Extractor, Limits
from ..parts.extract import pdf_text
from .samples import text_pdf

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"


def _image(lines: list[str], size: tuple[int, int], points: int) -> bytes:
    from PIL import Image, ImageDraw, ImageFont

    face = ImageFont.truetype(FONT, points)
    img = Image.new("L", size, 255)
    draw = ImageDraw.Draw(img)
    for i, line in enumerate(lines):
        draw.text((40, 40 + i * (points + 14)), line, font=face, fill=0)
    out = io.BytesIO()
    img.save(out, format="PNG")
    return out.getvalue()


def _median(runs: int, job: Callable[[], str | None], want: str) -> tuple[float, bool]:
    times, found = [], True
    for _ in range(runs):
        started = time.perf_counter()
        text = job()
        times.append(time.perf_counter() - started)
        found = found and want in (text or "")
    return statistics.median(times), found


def main(argv: list[str]) -> int:
    """Print the figures (see the module docstring)."""
    runs = int(argv[0]) if argv else 5
    line = _image(["INVOICE INV-48213"], (900, 160), 40)
    page = _image(
        [f"Line {i} the quick brown fox jumps over the lazy dog 12345" for i in range(40)], (2048, 2048), 36
    )
    document = text_pdf("Invoice INV-48213")
    print(f"{'what':<40} {'median s':>9} {'found':>6}")
    for languages in ("eng", "eng+chi_sim"):
        ocr = Extractor(languages=languages, timeout_s=60)
        for name, data, want in (
            ("one line", line, "INV-48213"),
            ("2048x2048 page, 40 lines", page, "Line 39"),
        ):
            seconds, found = _median(runs, functools.partial(ocr.read, data), want)
            print(f"{name + ' (' + languages + ')':<40} {seconds:>9.2f} {found!s:>6}")
    seconds, found = _median(runs, lambda: pdf_text(document, Limits()).text, "INV-48213")
    print(f"{'one-page PDF (child process)':<40} {seconds:>9.2f} {found!s:>6}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"largest child's peak RSS: {peak:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
