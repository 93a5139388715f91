"""Content parts: images and files in messages, stored once as blobs, never held in RAM.

A message holds its text and, after it, an ordered list of non-text parts
(:class:`~dormant.records.Part`): a reference to a content-addressed blob
(``sha256:<hex>``, :mod:`dormant.tools.blobs`) and its facts — the media type sniffed
from the bytes (never the client's claim), size, image width and height, file name
and an optional text (alt text, a caption, a PDF's extracted text).

* :mod:`.inputs` — what a caller sends: :class:`Text`, :class:`Image`, :class:`File`,
  and :class:`Limits` (per part, per input; settings ``DORMANT_MAX_PART_BYTES``, ...).
* :mod:`.media` — sniffing, image validation (decoded once, bomb limit, downscale to a
  longest side) and PDF checks (page limit, text via ``pypdf``).
* :mod:`.extract` — text from images (OCR: the Debian ``tesseract`` binary, setting
  ``DORMANT_OCR``) and PDFs (``pypdf``), each in a child process bounded in time and
  address space, at most a few at once; a failed or slow OCR stores the part without text.
* :mod:`.admit` — :func:`store_parts`: check every part first, then store the blobs;
  nothing is written when one is refused (InvalidInput, PayloadTooLarge 413,
  UnsupportedMedia 415).
* :mod:`.png` — a PNG's damaged optional chunks dropped before it is checked.
* :mod:`.render` — what a model is sent: ``image_url`` / ``file`` content parts with
  the bytes read from the store when the request is built, or a text placeholder for
  a text-only model; the per-image token cost the view budget counts.
"""

from __future__ import annotations

from .admit import store_parts
from .extract import Extractor
from .inputs import File, Image, Limits, PartInput, Text
from .render import image_tokens, placeholder

__all__ = [
    "Extractor",
    "File",
    "Image",
    "Limits",
    "PartInput",
    "Text",
    "image_tokens",
    "placeholder",
    "store_parts",
]
