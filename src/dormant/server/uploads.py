"""Images and files sent to the HTTP API: JSON parts (base64, bounded by the body limit).

:func:`admit_parts` decodes each part (invalid base64: 422, nothing written) and hands
them to :func:`dormant.parts.store_parts`, which checks all of them before it stores
any: a refused part answers 413 (too large, a decompression bomb, too many pages) or
415 (not an image, a truncated file) with nothing written. :func:`served_type` is
the media type a blob is served with: the sniffed type of a validated image or PDF,
else ``application/octet-stream`` (always with ``X-Content-Type-Options: nosniff``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from ..errors import InvalidInput
from ..parts import File, Image, Limits, Text, store_parts
from ..parts.inputs import PartInput
from ..parts.media import IMAGE_TYPES, sniff
from ..records import Part
from ..runtime import Runtime
from .schemas import PartIn

#: Media types a blob is served as; anything else is ``application/octet-stream``.
SERVED_TYPES = frozenset({*IMAGE_TYPES.values(), "application/pdf"})


def decoded(part: PartIn, index: int) -> PartInput:
    """One JSON part as an :class:`Image` or a :class:`File`."""
    try:
        data = base64.b64decode(part.data, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(f"part {index}: data is not valid base64") from None
    if part.type == "image":
        return Image(data, alt=part.text, name=part.name)
    return File(data, name=part.name, text=part.text)


async def admit_parts(
    rt: Runtime, thread_id: str, text: str, parts: Sequence[PartIn], agent: str
) -> tuple[str, tuple[Part, ...]]:
    """The input's text and its stored parts (every part checked before any is stored)."""
    items = [Text(text), *(decoded(p, n) for n, p in enumerate(parts))]
    return await store_parts(rt.store, thread_id, items, Limits.of(rt.settings), agent, rt.extractor)


def served_type(head: bytes) -> str:
    """The media type to serve a blob starting with ``head`` as."""
    kind = sniff(head)
    return kind if kind in SERVED_TYPES else "application/octet-stream"
