"""The text and the images and files of an OpenAI message's content; nothing silently dropped.

Text parts (``text``, ``input_text``, ``output_text``, ``refusal``) are joined. Images
and files (Chat Completions ``image_url`` and ``file``, Responses ``input_image`` and
``input_file``) are taken as data URIs (or bare base64): decoded here, then checked and
stored as content parts (:func:`with_parts`, :mod:`dormant.parts`) before the input is
admitted. A URL to fetch, a ``file_id``, audio or any other part is refused with 400
naming the part and where it was: a reply to a message whose content the agent never
saw would be a wrong answer given with confidence.

:func:`client_tools` checks the tools a client declares for itself (the one check of
both endpoints).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from typing import Any

import msgspec

from ..errors import UsageError
from ..parts import File, Image, Limits, PartInput, Text, store_parts
from ..records import NewInput
from ..runtime import Runtime
from ..tools import external

#: Content part types whose text is taken.
TEXT_PARTS = frozenset({"text", "input_text", "output_text", "refusal"})
#: Content part types taken as images and files (data URIs) of a user message.
MEDIA_PARTS = frozenset({"image_url", "input_image", "file", "input_file"})


def _data(value: Any, where: str) -> bytes:
    """The bytes of a data URI (or of bare base64); UsageError for anything else."""
    if not isinstance(value, str) or not value:
        raise UsageError(f"{where}: an image or file part needs its data (a base64 data URI)")
    if value.startswith(("http://", "https://")):
        raise UsageError(f"{where}: this server fetches no URLs; send the bytes as a data URI")
    if value.startswith("data:"):
        header, comma, value = value.partition(",")
        if not comma or not header.endswith(";base64"):
            raise UsageError(f"{where}: a data URI must be base64 (data:<type>;base64,...)")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise UsageError(f"{where}: the data is not valid base64") from None


def media_part(part: dict[str, Any], where: str) -> PartInput:
    """An ``image_url`` / ``input_image`` / ``file`` / ``input_file`` part as an Image or File."""
    kind = part["type"]
    if kind in ("image_url", "input_image"):
        url = part.get("image_url")
        url = url.get("url") if isinstance(url, dict) else url
        return Image(_data(url, where))
    holder = part.get("file") if kind == "file" else part
    if not isinstance(holder, dict) or "file_data" not in holder:
        raise UsageError(f"{where}: a {kind} part needs file_data (a file_id cannot be taken)")
    name = holder.get("filename")
    return File(_data(holder["file_data"], where), name=name if isinstance(name, str) else None)


async def with_parts(rt: Runtime, items: list[NewInput], media: list[list[PartInput]]) -> list[NewInput]:
    """``items`` with the images and files decoded from their messages (``media``, one
    list per item) checked and stored as their parts; all of an item's parts are checked
    before any is stored (413, 415: nothing written)."""
    out: list[NewInput] = []
    limits = Limits.of(rt.settings)
    for item, found in zip(items, media, strict=True):
        if found:
            parts = [Text(item.content), *found]
            text, stored = await store_parts(
                rt.store, item.thread_id, parts, limits, item.agent, rt.extractor
            )
            item = msgspec.structs.replace(item, content=text, parts=stored)
        out.append(item)
    return out


def content_text(content: str | list[Any] | None, where: str, media: list[PartInput] | None = None) -> str:
    """The text of ``content`` (a string or a list of parts), its text parts joined.

    With ``media``, its images and files are decoded into it; without, or for any other
    part that is not text, UsageError (400) naming it by ``where``.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for index, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        kind = part.get("type") if isinstance(part, dict) else None
        if media is not None and kind in MEDIA_PARTS:
            media.append(media_part(part, f"{where}.content.{index}"))
            continue
        if kind not in TEXT_PARTS:
            shown = repr(kind) if isinstance(kind, str) else "without a type"
            raise UsageError(
                f"{where}.content.{index}: a content part of type {shown} cannot be taken: this "
                "server's agents read text only (send text parts)"
            )
        text = part.get("text", part.get("refusal", ""))
        if not isinstance(text, str):
            raise UsageError(f"{where}.content.{index}: the text of a {kind} part must be a string")
        texts.append(text)
    return "".join(texts)


def client_tools(rt: Runtime, agent: str, schemas: Sequence[external.Schema]) -> tuple[str, frozenset[str]]:
    """A request's client tools (``schemas``, from :func:`~dormant.tools.external.from_chat`
    or ``from_responses``) as stored on its inputs, and their names. UsageError (400) for
    a name of one of the agent's own tools, too many or too large schemas, or schemas that
    would take over half of the agent's prompt budget (:mod:`dormant.tools.external`)."""
    own = rt.agents[agent].toolbox.names()
    text = external.declare(schemas, own, agent)
    limits = rt.limits.get(agent)
    if limits is not None:
        external.check_budget(limits, schemas, agent)
    return text, external.names(schemas)
