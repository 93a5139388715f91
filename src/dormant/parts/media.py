"""What a part's bytes are: sniffed, validated, images decoded once and maybe downscaled.

Nothing here trusts a client's media type or file name: the type comes from the
bytes. An image is opened by Pillow, its pixel count checked against the bomb limit
*before* it is decoded, then decoded once (a truncated file is refused) and, when its
longest side passes the limit, downscaled and re-encoded in its own format. A PDF's
pages are counted and its text extracted by ``pypdf`` in a child process bounded in
time and address space (:func:`dormant.parts.extract.pdf_text`), in pages and characters.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass

import msgspec

from ..errors import PayloadTooLarge, UnsupportedMedia
from .extract import pdf_text
from .inputs import Limits
from .png import without_bad_ancillary

#: Image formats taken (Pillow's names) and their media types.
IMAGE_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


@dataclass(frozen=True, slots=True)
class Checked:
    """A part's bytes after the checks, with the facts found in them."""

    kind: str  # "image" or "file"
    data: bytes
    media_type: str
    width: int = 0
    height: int = 0
    text: str | None = None
    #: why text that could have been extracted was not (a PDF's child killed: time, RAM)
    problem: str | None = None


def sniff(data: bytes) -> str:
    """The media type of ``data`` from its bytes alone."""
    head = data[:16]
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head.startswith(b"%PDF-"):
        return "application/pdf"
    if b"\x00" not in data[:8192]:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return "application/octet-stream"
        stripped = text.lstrip()
        if stripped[:1] in ("{", "["):
            try:
                msgspec.json.decode(data)
                return "application/json"
            except msgspec.DecodeError:
                pass
        return "text/plain"
    return "application/octet-stream"


def check_image(data: bytes, limits: Limits) -> Checked:
    """``data`` as a validated image, downscaled to ``limits.image_max_side``."""
    from PIL import Image as PILImage  # imported on first use: most processes never decode one
    from PIL import UnidentifiedImageError

    media = sniff(data)
    if not media.startswith("image/"):
        raise UnsupportedMedia(f"an image part is not an image (its bytes are {media})")
    if media == "image/png":
        data = without_bad_ancillary(data)  # as browsers and model servers read it
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            img = PILImage.open(io.BytesIO(data))
            if img.format not in IMAGE_TYPES:
                raise UnsupportedMedia(f"image format {img.format} is not taken (PNG, JPEG, WebP, GIF)")
            width, height = img.size
            if width * height > limits.image_pixels:
                raise PayloadTooLarge(
                    f"an image of {width} by {height} pixels is over the limit of {limits.image_pixels}"
                )
            img.load()  # decoded once: a truncated or corrupt file fails here
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        raise PayloadTooLarge("the image is a decompression bomb (too many pixels)") from None
    except UnidentifiedImageError:
        raise UnsupportedMedia("the image cannot be decoded: truncated or corrupt") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise UnsupportedMedia(f"the image cannot be decoded (truncated or corrupt): {exc}") from None
    fmt = img.format
    side = limits.image_max_side
    if side and max(width, height) > side:
        img.thumbnail((side, side))
        out = io.BytesIO()
        if fmt == "JPEG" and img.mode not in ("RGB", "L"):
            img = img.convert("RGB")  # type: ignore[assignment]
        img.save(out, format=fmt, **({"quality": 90} if fmt in ("JPEG", "WEBP") else {}))
        data = out.getvalue()
        width, height = img.size
    img.close()
    return Checked("image", data, IMAGE_TYPES[fmt], width, height)


def check_file(data: bytes, limits: Limits) -> Checked:
    """``data`` as a file part: a PDF checked and its text extracted, text decoded."""
    media = sniff(data)
    if media == "application/pdf":
        found = pdf_text(data, limits)
        return Checked("file", data, media, text=found.text, problem=found.problem)
    if media.startswith("image/"):
        return check_image(data, limits)
    if media in ("text/plain", "application/json"):
        return Checked("file", data, media, text=data.decode("utf-8")[: limits.text_chars])
    return Checked("file", data, media)
