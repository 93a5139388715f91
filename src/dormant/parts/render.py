"""What a model is shown of a part, and what an image costs in the budget.

A model that sees images gets an ``image_url`` content part whose data URI is built
from the blob store when the request is built (:func:`resolve`), never kept for an
idle thread; a file goes as a ``file`` part where the dialect takes them, else as its
text. A text-only model gets :func:`placeholder`: the part's text or a short line
naming the image, its width and height and its text (``no text`` when none), so a thread can switch models.

Image cost follows OpenAI's published tile rule (:func:`image_tokens`): ``low`` detail
is 85 tokens; ``high`` fits the image in 2048 by 2048, scales its shortest side to 768,
and costs 85 + 170 per 512-px tile. Other servers get the same count (an estimate).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Protocol

import msgspec

from ..errors import NotFound
from ..records import BlobRef, Message, Part
from .budget import encoded_size

#: The tokens an image costs at ``low`` detail, and the base of ``high``.
IMAGE_BASE_TOKENS = 85
#: The tokens of each 512-px tile at ``high`` detail.
IMAGE_TILE_TOKENS = 170
#: The most characters of a part's text a text-only model is shown.
PLACEHOLDER_TEXT_CHARS = 4000


def image_tokens(width: int, height: int, detail: str = "auto") -> int:
    """Tokens an image costs (OpenAI's rule; ``auto`` counts as ``high``)."""
    if detail == "low" or width <= 0 or height <= 0:
        return IMAGE_BASE_TOKENS
    w, h = float(width), float(height)
    if max(w, h) > 2048:
        scale = 2048 / max(w, h)
        w, h = w * scale, h * scale
    if min(w, h) > 768:
        scale = 768 / min(w, h)
        w, h = w * scale, h * scale
    tiles = math.ceil(w / 512) * math.ceil(h / 512)
    return IMAGE_BASE_TOKENS + IMAGE_TILE_TOKENS * tiles


def parts_tokens(parts: tuple[Part, ...], count: Callable[[str], int]) -> int:
    """Tokens a message's parts cost, whichever way the model is sent them: each image
    at ``high`` detail plus its placeholder, each file its whole text plus its
    placeholder (an upper bound of either rendering). ``count`` counts a text's tokens.
    A part that is no longer whole (:attr:`~dormant.records.Part.whole`) is shown as its
    placeholder alone, and costs that."""
    total = 0
    for part in parts:
        total += count(placeholder(part)) + 8  # 8: a content part's framing
        if not part.ref:
            continue
        if part.kind == "image":
            total += image_tokens(part.width, part.height, "high")
        elif part.text:
            total += count(part.text)
    return total


def placeholder(part: Part) -> str:
    """The text a model that cannot take ``part`` is shown instead."""
    name = part.name or part.kind
    text = (part.text or "")[:PLACEHOLDER_TEXT_CHARS]
    if part.kind == "image":
        return f"[image: {name}, {part.width}\N{MULTIPLICATION SIGN}{part.height}, {text or 'no text'}]"
    head = f"[file: {name}, {part.media_type}, {part.size} bytes]"
    return f"{head}\n{text}" if text else head


def demoted(message: Message) -> Message:
    """``message`` with its parts as their facts and text only (their references dropped,
    its stored count with them: an image no longer costs its tiles). ``message`` itself
    when none of its parts is whole."""
    if not any(p.ref for p in message.parts):
        return message
    parts = tuple(msgspec.structs.replace(p, ref="") if p.ref else p for p in message.parts)
    return msgspec.structs.replace(message, parts=parts, tokens=0)


def text_of(message: Message) -> str:
    """A message's text with its parts as placeholders: what a text-only model reads."""
    if not message.parts:
        return message.content
    return "\n\n".join([message.content, *(placeholder(p) for p in message.parts)]).strip()


def content_parts(message: Message, detail: str, files: bool) -> list[dict[str, Any]]:
    """A user message's Chat Completions content array; images name their blob in
    ``url`` until :func:`resolve` puts the bytes in."""
    out: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    for part in message.parts:
        if not part.ref:  # its facts and text only
            out.append({"type": "text", "text": placeholder(part)})
        elif part.kind == "image":
            out.append({"type": "image_url", "image_url": {"url": part.ref, "detail": detail}})
        elif files and part.media_type == "application/pdf":
            out.append({"type": "file", "file": {"filename": part.name or "file.pdf", "file_data": part.ref}})
        else:
            out.append({"type": "text", "text": placeholder(part)})
    return out


#: Reads a whole blob by its reference (the store's bytes, bounded by the part limit).
BlobFetch = Callable[[str], Awaitable[bytes]]


class BlobSource(Protocol):
    """What :func:`read_whole` needs of a store."""

    async def get_blob(self, thread_id: str, ref: str) -> BlobRef:
        """The blob ``ref`` as ``thread_id`` may see it; NotFound otherwise."""
        ...

    async def read_blob(self, thread_id: str, ref: str, offset: int = 0, length: int = 65536) -> bytes:
        """Bytes ``offset .. offset + length`` of the blob ``ref``."""
        ...


#: Bytes of one read of a part's blob (the store's largest read).
READ_BYTES = 1024 * 1024


async def read_whole(source: BlobSource, thread_id: str, ref: str) -> bytes:
    """All the bytes of a part's blob (bounded by the part limit it was admitted under),
    read in store-sized pieces; the caller drops them once the request is sent."""
    size = (await source.get_blob(thread_id, ref)).size
    pieces = bytearray()
    while len(pieces) < size:
        piece = await source.read_blob(thread_id, ref, len(pieces), min(READ_BYTES, size - len(pieces)))
        if not piece:
            break
        pieces += piece
    return bytes(pieces)


def _inlined(messages: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], dict[str, Any], str]]:
    """Each content item of ``messages`` that names a blob: the item, the dict holding
    the reference and its key."""
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for item in content:
            holder = item.get("image_url") if item.get("type") == "image_url" else None
            key = "url"
            if item.get("type") == "file":
                holder, key = item.get("file"), "file_data"
            if holder and str(holder.get(key, "")).startswith("sha256:"):
                yield item, holder, key


def inline_bytes(messages: list[dict[str, Any]], sizes: dict[str, int]) -> int:
    """The bytes :func:`resolve` will put into ``messages`` (each blob's base64 length,
    once per place it appears); ``sizes`` maps a reference to its blob's size."""
    return sum(encoded_size(sizes.get(holder[key], 0)) for _, holder, key in _inlined(messages))


async def resolve(messages: list[dict[str, Any]], media: dict[str, str], fetch: BlobFetch) -> None:
    """Put the bytes of each referenced blob into ``messages`` as data URIs, in place.
    ``media`` maps a reference to its media type. A blob the thread no longer refers to
    (retention released it after the view was built: NotFound) is sent as a short text
    instead, which costs less than the image or file the budget counted."""
    for item, holder, key in list(_inlined(messages)):
        ref = holder[key]
        try:
            data = await fetch(ref)
        except NotFound:
            item.clear()
            item.update(type="text", text="[no longer kept]")
            continue
        kind = media.get(ref, "application/octet-stream")
        holder[key] = f"data:{kind};base64,{base64.b64encode(data).decode()}"
