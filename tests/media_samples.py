"""Real images and PDFs made for the content-part tests (Pillow and pypdf, in memory)."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image as PILImage
from pypdf import PdfWriter

from dormant.bench.samples import text_pdf


def png(width: int = 64, height: int = 48, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    """A real PNG of ``width`` by ``height``."""
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), color).save(out, format="PNG")
    return out.getvalue()


def jpeg(width: int = 64, height: int = 48) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (width, height), (10, 120, 200)).save(out, format="JPEG")
    return out.getvalue()


def bomb_png(width: int = 100_000, height: int = 100_000) -> bytes:
    """A tiny PNG whose header claims ``width`` by ``height`` pixels (a decompression bomb)."""
    data = bytearray(png(8, 8))
    ihdr = struct.pack(">II", width, height) + bytes(data[24:29])
    data[16:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF)
    return bytes(data)


def pdf(text: str = "Invoice 4711", pages: int = 1) -> bytes:
    """A real PDF of ``pages`` pages, the first showing ``text`` (Helvetica)."""
    if pages <= 1:
        return text_pdf(text)
    writer = PdfWriter()
    for _ in range(pages):
        writer.add_blank_page(width=100, height=100)
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()
