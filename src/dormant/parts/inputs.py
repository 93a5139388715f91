"""The parts a caller sends (:class:`Text`, :class:`Image`, :class:`File`) and the limits on them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from ..errors import InvalidInput, PayloadTooLarge

if TYPE_CHECKING:
    from ..config import Settings

#: Bytes of a part: a path to a file (read once, bounded) or the bytes themselves.
Source: TypeAlias = str | os.PathLike[str] | bytes


@dataclass(frozen=True, slots=True)
class Text:
    """Text of a message (several are joined by blank lines, in order)."""

    text: str


@dataclass(frozen=True, slots=True)
class Image:
    """An image (PNG, JPEG, WebP or GIF, sniffed from its bytes). ``alt`` is the text a
    model that cannot see images is shown; ``name`` defaults to the path's file name."""

    source: Source
    alt: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class File:
    """A file: PDF (its text extracted, pages bounded), plain text, CSV, JSON, or any
    other bytes as an opaque file. ``text`` overrides the extracted text. Bytes that
    are an image (sniffed) are checked and stored as an image part."""

    source: Source
    name: str | None = None
    text: str | None = None


#: What :meth:`Runtime.send(parts=...) <dormant.runtime.Runtime.send>` takes.
PartInput: TypeAlias = Text | Image | File


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds on parts; each refusal is an InvalidInput with nothing written."""

    part_bytes: int = 20 * 1024 * 1024
    input_bytes: int = 50 * 1024 * 1024
    count: int = 16
    #: bytes of parts one thread takes in a UTC day (0: no limit)
    thread_day_bytes: int = 500 * 1024 * 1024
    image_pixels: int = 40_000_000
    #: images are downscaled to this longest side before storing (0: never)
    image_max_side: int = 2048
    pdf_pages: int = 200
    #: seconds a PDF's child process may take to count its pages and extract its text
    pdf_timeout_s: float = 20.0
    #: address space of a PDF-text or OCR child process (bytes)
    child_memory_bytes: int = 512 * 1024 * 1024
    #: most characters of text kept per part (extracted PDF text beyond is cut)
    text_chars: int = 200_000

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        """The limits the settings give (``DORMANT_MAX_PART_BYTES``, ...)."""
        return cls(
            part_bytes=settings.max_part_bytes,
            input_bytes=settings.max_input_parts_bytes,
            count=settings.max_parts_per_input,
            thread_day_bytes=settings.max_thread_day_part_bytes,
            image_pixels=settings.max_image_pixels,
            image_max_side=settings.image_max_side,
            pdf_pages=settings.max_pdf_pages,
            pdf_timeout_s=settings.pdf_timeout_s,
            child_memory_bytes=settings.extract_memory_bytes,
        )


def read_source(source: Source, limit: int) -> tuple[bytes, str | None]:
    """The bytes of ``source`` (at most ``limit``; PayloadTooLarge past it, read no
    further) and the file name of a path."""
    if isinstance(source, bytes):
        if len(source) > limit:
            raise PayloadTooLarge(f"a part of {len(source)} bytes is over the limit of {limit}")
        return source, None
    path = Path(source)
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise InvalidInput(f"cannot read part {str(path)!r}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise PayloadTooLarge(f"part {path.name!r} is over the limit of {limit} bytes")
    return data, path.name
