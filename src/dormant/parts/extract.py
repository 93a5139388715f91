"""Text from images and documents at admission, bounded in time, RAM and concurrency.

Both extractors run outside dormant's process, as children it can kill:

* **OCR** (:class:`Extractor`): the Debian ``tesseract`` binary (``tesseract-ocr`` with
  the ``-eng`` and ``-chi-sim`` language data; nothing is downloaded). An image is
  decoded, flattened to grey and downscaled to ``max_side`` in a worker thread, then
  piped to ``tesseract stdin stdout`` under ``prlimit --as`` (its address space) with
  one OpenMP thread, killed past ``timeout_s``. At most ``concurrency`` images at once;
  one that waits longer than its timeout for a turn is not read. Whatever goes wrong —
  a timeout, the RAM limit, an image tesseract cannot read — the part is stored
  without text, logged (``ocr_failed``) and counted (:class:`ExtractStats`); OCR never
  refuses an input. A missing binary or language is a :class:`~dormant.errors.UsageError`
  when the extractor is made (start-up), not at the first image.
* **PDF text** (:func:`pdf_text`): ``pypdf`` in a child Python process
  (:mod:`dormant.parts.pdf_child`) under the same address-space limit, killed past
  ``Limits.pdf_timeout_s``; at most :data:`PDF_CHILDREN` at once in a process. Its page
  count comes first: over the page limit the PDF is refused (413); when the child is
  killed before it counted the pages (a PDF too slow or too large to parse) it is
  refused (415), since its page limit could not be checked; killed after, the PDF is
  stored without text.

This module never calls pytesseract: its API has no way to limit the child's address
space (no pre-exec hook, no command prefix) and it goes through temporary files,
while tesseract's own command line reads stdin and writes stdout.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import Overloaded, PayloadTooLarge, UnsupportedMedia, UsageError
from .inputs import Limits

if TYPE_CHECKING:
    from ..config import Settings

log = logging.getLogger("dormant.parts")

__all__ = ["PDF_CHILDREN", "ExtractStats", "Extractor", "PdfText", "child_command", "pdf_text"]

#: PDF-text children one process runs at once (a third waits, up to its timeout, then 503).
PDF_CHILDREN = 2
_pdf_slots = threading.BoundedSemaphore(PDF_CHILDREN)
_CHILD = Path(__file__).with_name("pdf_child.py")
#: Tesseract's page segmentation mode: 6, the image as one block of text. The automatic
#: layout (3) dropped the first Chinese glyph of a two-line sample (票号码 for 发票号码)
#: where 6 read every one; for recall a complete text matters more than its layout.
PAGE_SEGMENTATION = "6"
#: White pixels around an image given to tesseract.
BORDER = 24
#: Characters of OCR text kept per image.
OCR_TEXT_CHARS = 20_000
#: A space tesseract puts between two CJK characters (it reads them as words).
_CJK_GAP = re.compile(
    r"(?<=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef]) +(?=[\u3000-\u303f\u3400-\u9fff\uff00-\uffef])"
)


def child_command(argv: list[str], memory_bytes: int) -> list[str]:
    """``argv`` run under an address-space limit of ``memory_bytes`` (``prlimit --as``;
    util-linux, present on every Debian system). Without ``prlimit`` on the PATH the
    command runs unlimited, and that is logged."""
    prlimit = _prlimit()
    if prlimit is None:
        return argv
    return [prlimit, f"--as={memory_bytes}", "--", *argv]


@functools.cache
def _prlimit() -> str | None:
    found = shutil.which("prlimit")
    if found is None:
        log.warning("extract_unlimited: prlimit is not on the PATH; children run without a RAM limit")
    return found


def _env() -> dict[str, str]:
    """A child's environment: the PATH and Tesseract's data dir, one OpenMP thread."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "OMP_THREAD_LIMIT": "1", "LC_ALL": "C.UTF-8"}
    if "TESSDATA_PREFIX" in os.environ:
        env["TESSDATA_PREFIX"] = os.environ["TESSDATA_PREFIX"]
    return env


@dataclass
class ExtractStats:
    """What the extractors did in this process. Counters only."""

    ocr_images: int = 0  # images OCR read text from (or found none in)
    ocr_timeouts: int = 0  # killed past their timeout: stored without text
    ocr_failures: int = 0  # tesseract failed (RAM limit, unreadable image): stored without text
    ocr_busy: int = 0  # waited past their timeout for a turn: stored without text
    pdf_timeouts: int = 0  # PDFs stored without text (their child killed after counting pages)
    seconds: float = 0.0  # wall time of OCR runs
    #: the last problem, for logs and tests
    last_problem: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class PdfText:
    """What :func:`pdf_text` found: the text (None: none, or not extracted) and why not."""

    text: str | None
    pages: int
    problem: str | None = None


def pdf_text(data: bytes, limits: Limits) -> PdfText:
    """The text of a PDF, read by a child process bounded in time and address space.

    PayloadTooLarge: more than ``limits.pdf_pages`` pages. UnsupportedMedia: the PDF
    cannot be read, or its pages were not counted within ``limits.pdf_timeout_s``.
    Overloaded: :data:`PDF_CHILDREN` were busy for the whole timeout. Blocking: call it
    from a worker thread."""
    timeout = limits.pdf_timeout_s
    if not _pdf_slots.acquire(timeout=timeout):
        raise Overloaded("too many PDFs are being read at once; retry shortly", retry_after=timeout)
    try:
        argv = [sys.executable, "-I", str(_CHILD), str(limits.pdf_pages), str(limits.text_chars)]
        cmd = child_command(argv, limits.child_memory_bytes)
        problem: str | None = None
        try:
            done = subprocess.run(
                cmd, input=data, capture_output=True, timeout=timeout, env=_env(), check=False
            )
            out, code = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            out, code = exc.stdout or b"", -9
            problem = f"not read within {timeout:g} s"
    finally:
        _pdf_slots.release()
    lines = [_json(line) for line in out.splitlines()]
    pages: int | None = None
    for line in lines:
        value = line.get("pages")
        if isinstance(value, int):
            pages = value
            break
    error = next((str(x["error"]) for x in lines if "error" in x), None)
    text = next((x["text"] for x in lines if "text" in x), None)
    if error is not None:
        raise UnsupportedMedia(f"the PDF cannot be read: {error}")
    if pages is None:
        why = problem or f"its reader failed (exit {code}: over its RAM limit, or a damaged file)"
        raise UnsupportedMedia(f"the PDF's pages could not be counted: {why}")
    if pages > limits.pdf_pages:
        raise PayloadTooLarge(f"a PDF of {pages} pages is over the limit of {limits.pdf_pages}")
    if not isinstance(text, str):
        return PdfText(None, pages, problem or f"its reader failed after counting pages (exit {code})")
    return PdfText(text or None, pages)


def _json(line: bytes) -> dict[str, object]:
    try:
        value = json.loads(line)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class Extractor:
    """OCR of images (see the module docstring) and the counters of both extractors.
    Make one per process, at start-up: with ``ocr`` the constructor checks the binary
    and its languages (UsageError); without, :meth:`image_text` reads nothing."""

    def __init__(
        self,
        *,
        languages: str = "eng+chi_sim",
        timeout_s: float = 20.0,
        concurrency: int = 1,
        max_side: int = 2048,
        memory_bytes: int = 512 * 1024 * 1024,
        binary: str = "tesseract",
        ocr: bool = True,
    ) -> None:
        self.ocr = ocr
        self.languages = languages
        self.timeout_s = timeout_s
        self.max_side = max_side
        self.memory_bytes = memory_bytes
        self.concurrency = concurrency
        self.stats = ExtractStats()
        self._slots: asyncio.Semaphore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.binary = binary
        if not ocr:
            return
        found = shutil.which(binary)
        if found is None:
            raise UsageError(
                f"OCR is on (DORMANT_OCR) but {binary!r} is not installed: apt-get install "
                "tesseract-ocr tesseract-ocr-eng tesseract-ocr-chi-sim, or set DORMANT_OCR=0"
            )
        self.binary = found
        missing = set(languages.split("+")) - set(self.installed_languages())
        if missing:
            raise UsageError(
                f"OCR languages not installed for tesseract: {', '.join(sorted(missing))} (installed: "
                f"{', '.join(self.installed_languages()) or 'none'}); apt-get install tesseract-ocr-LANG "
                "(chi_sim: tesseract-ocr-chi-sim), or set DORMANT_OCR_LANGUAGES"
            )

    @classmethod
    def of(cls, settings: Settings) -> Extractor:
        """The extractor the settings ask for (OCR only with ``DORMANT_OCR``; its
        counters count PDFs stored without text either way)."""
        return cls(
            ocr=settings.ocr,
            languages=settings.ocr_languages,
            timeout_s=settings.ocr_timeout_s,
            concurrency=settings.ocr_concurrency,
            max_side=settings.ocr_max_side,
            memory_bytes=settings.extract_memory_bytes,
        )

    def installed_languages(self) -> list[str]:
        """The languages ``tesseract --list-langs`` names."""
        try:
            done = subprocess.run(
                [self.binary, "--list-langs"], capture_output=True, timeout=30, env=_env(), check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise UsageError(f"cannot run {self.binary}: {exc}") from None
        lines = (done.stdout + done.stderr).decode("utf-8", "replace").splitlines()
        return [line.strip() for line in lines if line.strip() and " " not in line.strip()]

    async def image_text(self, data: bytes) -> str | None:
        """The text OCR finds in image ``data`` (None: none, or not read; never raises
        for the image's sake). Off the event loop; at most ``concurrency`` at once."""
        if not self.ocr:
            return None
        loop = asyncio.get_running_loop()
        if self._slots is None or self._loop is not loop:
            self._slots, self._loop = asyncio.Semaphore(self.concurrency), loop
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._slots.acquire()
        except TimeoutError:
            self.stats.ocr_busy += 1
            self._problem("busy", f"no OCR turn within {self.timeout_s:g} s")
            return None
        try:
            return await asyncio.to_thread(self.read, data)
        finally:
            self._slots.release()

    def read(self, data: bytes) -> str | None:
        """:meth:`image_text`, blocking, without the concurrency bound."""
        started = time.perf_counter()
        try:
            page = self.prepare(data)
        except Exception as exc:  # Pillow's errors are many; an unreadable image has no text
            self.stats.ocr_failures += 1
            self._problem("bad_image", f"{type(exc).__name__}: {exc}")
            return None
        argv = [self.binary, "stdin", "stdout", "-l", self.languages, "--psm", PAGE_SEGMENTATION]
        try:
            done = subprocess.run(
                child_command(argv, self.memory_bytes),
                input=page,
                capture_output=True,
                timeout=self.timeout_s,
                env=_env(),
                check=False,
            )
        except subprocess.TimeoutExpired:
            self.stats.ocr_timeouts += 1
            self._problem("timeout", f"killed after {self.timeout_s:g} s")
            return None
        finally:
            self.stats.seconds += time.perf_counter() - started
        if done.returncode != 0:
            self.stats.ocr_failures += 1
            error = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
            self._problem("failed", f"exit {done.returncode}: {error[0][:200]}")
            return None
        self.stats.ocr_images += 1
        return clean_text(done.stdout.decode("utf-8", "replace"))

    def prepare(self, data: bytes) -> bytes:
        """``data`` as the PNG tesseract reads: its first frame, on white, grey, at most
        ``max_side`` on its longest side, with a white margin of :data:`BORDER` pixels."""
        from PIL import Image as PILImage
        from PIL import ImageOps

        with PILImage.open(io.BytesIO(data)) as img:
            if img.format == "JPEG":
                img.draft("L", (self.max_side, self.max_side))  # decoded smaller: less RAM
            frame = img.convert("RGBA")
        flat = PILImage.new("RGB", frame.size, (255, 255, 255))
        flat.paste(frame, mask=frame.getchannel("A"))
        grey = flat.convert("L")
        grey.thumbnail((self.max_side, self.max_side))
        # a white margin: tesseract misses glyphs that touch the edge of the page
        grey = ImageOps.expand(grey, border=BORDER, fill=255)
        out = io.BytesIO()
        grey.save(out, format="PNG")
        return out.getvalue()

    def pdf_problem(self, name: str | None, problem: str) -> None:
        """Count and log a PDF stored without its text (``problem``: why)."""
        self.stats.pdf_timeouts += 1
        self.stats.last_problem = f"pdf: {problem}"
        log.warning("pdf_text_skipped %s: %s (stored without text)", name or "a PDF", problem)

    def _problem(self, what: str, detail: str) -> None:
        self.stats.last_problem = f"{what}: {detail}"
        log.warning("ocr_failed %s: %s (stored without text)", what, detail, extra={"error": detail})


def clean_text(text: str) -> str | None:
    """OCR output tidied: form feeds and blank runs gone, CJK characters joined
    (tesseract spaces them as words), at most :data:`OCR_TEXT_CHARS`."""
    lines = [_CJK_GAP.sub("", " ".join(line.split())) for line in text.replace("\f", "\n").splitlines()]
    joined = "\n".join(line for line in lines if line)[:OCR_TEXT_CHARS]
    return joined or None
