"""What a tool call's output is stored as: its text, and the images and files it returned.

A tool may return an :class:`~dormant.parts.Image` or a :class:`~dormant.parts.File`
(bytes or a path), or a list mixing them with text (``str`` or
:class:`~dormant.parts.Text`); an MCP server's ``ImageContent`` and embedded resource
blobs become the same (:mod:`dormant.tools.mcp.hub`). Such an output is a
:class:`PartsOutput`, and :func:`stored_result` admits its parts exactly as a user's
(:func:`dormant.parts.store_parts`: the type sniffed from the bytes, images decoded
once under the bomb limit and downscaled, the per-part, per-input and per-thread-day
limits): all of them are checked before any is stored, and a refused one makes the
whole result an error text for the model, with nothing stored. Its text goes the way of
any tool output (a blob past the threshold, :func:`~dormant.tools.blobs.stored_output`).
The tool message keeps the parts (:attr:`~dormant.records.Message.parts`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeAlias

from ..errors import InvalidInput
from ..parts import File, Image, Limits, Text, store_parts
from ..parts.admit import BlobWriter
from ..records import Part
from ..text import clean
from .blobs import ToolOutput, stored_output

#: One piece of a tool's output that carries parts.
PartItem: TypeAlias = str | Text | Image | File


@dataclass(frozen=True, slots=True)
class PartsOutput:
    """A tool's output with images or files: ``items`` in order (text, images, files)."""

    items: tuple[PartItem, ...]


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What a tool call's result is recorded as. ``is_error``: a part was refused, and
    ``content`` says why (nothing of the output was stored)."""

    content: str
    parts: tuple[Part, ...] = ()
    is_error: bool = False


def parts_output(result: Any, as_text: Callable[[Any], str]) -> PartsOutput | None:
    """``result`` as a :class:`PartsOutput` when it is an Image or File, or a list or
    tuple holding at least one Image, File or Text; None otherwise (a plain list stays
    JSON). Other values in such a list become text through ``as_text``."""
    if isinstance(result, Image | File):
        return PartsOutput((result,))
    if not isinstance(result, list | tuple) or not any(isinstance(x, Image | File | Text) for x in result):
        return None
    return PartsOutput(tuple(x if isinstance(x, str | Text | Image | File) else as_text(x) for x in result))


def _cleaned(item: PartItem) -> Text | Image | File:
    """``item`` as a part whose texts (a tool's: alt text, names) a store can hold."""
    if isinstance(item, str):
        return Text(item)
    if isinstance(item, Text):
        return item
    name = clean(item.name) if item.name is not None else None
    if isinstance(item, Image):
        return replace(item, name=name, alt=clean(item.alt) if item.alt is not None else None)
    return replace(item, name=name, text=clean(item.text) if item.text is not None else None)


async def stored_result(
    store: BlobWriter, thread_id: str, output: ToolOutput | PartsOutput, threshold: int, limits: Limits
) -> ToolResult:
    """Store a tool's ``output`` for ``thread_id``: its text (a blob past ``threshold``
    bytes) and, for a :class:`PartsOutput`, its images and files under ``limits``.

    A refused part (InvalidInput, PayloadTooLarge, UnsupportedMedia) is an error result
    naming the reason; nothing of the output is stored then. Raises what the store raises.
    """
    if not isinstance(output, PartsOutput):
        return ToolResult(await stored_output(store, thread_id, output, threshold))
    items = [_cleaned(x) for x in output.items]
    try:
        text, parts = await store_parts(store, thread_id, items, limits)
    except InvalidInput as exc:
        return ToolResult(clean(f"error: the tool's images or files were refused: {exc}"), is_error=True)
    return ToolResult(await stored_output(store, thread_id, text, threshold), parts)
