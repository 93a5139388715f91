"""``multipart/form-data`` inputs: files streamed to bounded temp files as they arrive.

:func:`read_form` feeds the request stream, chunk by chunk, to ``python-multipart``'s
streaming parser. Text fields (``content``, ``agent``, ``priority``, ``strategy``) are
kept (each bounded); each file field (``image`` or ``file``, repeated, in order; a
``text`` field right after a file is its alt text or caption, the file name is the
part's ``filename``) goes to its own temporary file on disk, never held in RAM, with
its SHA-256 computed on the way. The limits of :class:`~dormant.parts.Limits` are
checked as the bytes arrive and the request is refused at once, reading no further:

* more files than ``count``: 422; a file over ``part_bytes`` or all of them over
  ``input_bytes``: 413; an ``image`` field whose first bytes are not an image
  (an executable named ``.jpg``): 415.

Pixels and PDF pages are checked once a file is complete, by
:func:`dormant.parts.store_parts`, before anything is stored. The temp files live in
one directory removed when the request ends, whatever its outcome: a refused upload
leaves nothing behind (no blob, no input, no thread).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.types import Scope

from ..errors import InvalidInput, PayloadTooLarge, UnsupportedMedia
from ..parts import File, Image, Limits
from ..parts.inputs import PartInput
from ..parts.media import sniff

#: The request a multipart body may stream to (the inputs of a thread).
INPUTS_PATH = re.compile(r"^/v1/threads/[^/]+/inputs$")
#: Text fields taken, and the most bytes of each but ``content`` (bounded by the input limit).
FIELDS = frozenset({"content", "agent", "priority", "strategy", "text"})
FIELD_BYTES = 64 * 1024
#: Most text fields, and most bytes of one part's headers.
MAX_FIELDS = 64
HEADER_BYTES = 8 * 1024
#: Bytes of a file's head sniffed before an ``image`` field is let through.
SNIFF_BYTES = 16


#: The multipart body in the OpenAPI operation of ``POST /v1/threads/{id}/inputs``.
FORM_DOC: dict[str, Any] = {
    "requestBody": {
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "string"},
                        "agent": {"type": "string"},
                        "priority": {"type": "integer", "enum": [0, 1, 2]},
                        "strategy": {
                            "type": "string",
                            "enum": ["enqueue", "reject", "interrupt", "rollback"],
                        },
                        "image": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "file": {"type": "array", "items": {"type": "string", "format": "binary"}},
                        "text": {
                            "type": "string",
                            "description": "alt text or caption of the file before it",
                        },
                    },
                }
            }
        }
    },
    "responses": {"415": {"description": "an image part that is not an image, or a corrupt file"}},
}


def is_multipart(scope: Scope) -> bool:
    """Whether the request is a ``multipart/form-data`` POST to a thread's inputs."""
    if scope.get("type") != "http" or scope.get("method") != "POST":
        return False
    if not INPUTS_PATH.match(scope.get("path", "")):
        return False
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return bytes(value).lower().startswith(b"multipart/form-data")
    return False


@dataclass
class Upload:
    """One file of the form, on disk."""

    kind: str  # "image" or "file"
    path: Path
    name: str | None
    size: int = 0
    text: str | None = None
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)
    head: bytes = b""

    def part(self) -> PartInput:
        """The part to admit (its bytes read, bounded, from the temp file)."""
        if self.kind == "image":
            return Image(self.path, alt=self.text, name=self.name)
        return File(self.path, name=self.name, text=self.text)


@dataclass
class Form:
    """A parsed form: its text fields and its files in order."""

    fields: dict[str, str] = field(default_factory=dict)
    uploads: list[Upload] = field(default_factory=list)


class _Reader:
    """The parser's callbacks: every limit checked as its bytes arrive."""

    def __init__(self, folder: Path, limits: Limits, max_content: int) -> None:
        self.folder = folder
        self.limits = limits
        self.max_content = max_content
        self.form = Form()
        self.header_name = b""
        self.header_value = b""
        self.header_bytes = 0
        self.disposition = b""
        self.field_name = ""
        self.data = bytearray()
        self.upload: Upload | None = None
        self.last: str = ""  # the previous part: "file" or a field name
        self.total = 0
        self.fields = 0
        #: file bytes waiting to be written (off the event loop, after each chunk)
        self.pending: list[tuple[IO[bytes], bytes]] = []
        self.handles: list[IO[bytes]] = []

    def on_part_begin(self) -> None:
        self.disposition = b""
        self.header_bytes = 0
        self.data = bytearray()
        self.upload = None

    def on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_grow(end - start)
        self.header_name += data[start:end]

    def on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_grow(end - start)
        self.header_value += data[start:end]

    def _header_grow(self, size: int) -> None:
        self.header_bytes += size
        if self.header_bytes > HEADER_BYTES:
            raise InvalidInput(f"a form part's headers are over {HEADER_BYTES} bytes")

    def on_header_end(self) -> None:
        if self.header_name.lower() == b"content-disposition":
            self.disposition = self.header_value
        self.header_name = b""
        self.header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.disposition)
        name = options.get(b"name")
        if name is None:
            raise InvalidInput('a form part has no Content-Disposition "name"')
        self.field_name = name.decode("utf-8", "replace")
        if self.field_name in ("image", "file"):
            if len(self.form.uploads) >= self.limits.count:
                raise InvalidInput(f"an input carries at most {self.limits.count} images and files")
            filename = options.get(b"filename")
            path = self.folder / f"{len(self.form.uploads)}.part"
            handle = path.open("wb")
            self.handles.append(handle)
            given = filename.decode("utf-8", "replace")[:256] if filename else None
            self.upload = Upload(self.field_name, path, given or None)
            self.form.uploads.append(self.upload)
            return
        if self.field_name not in FIELDS:
            known = ", ".join(sorted(FIELDS | {"image", "file"}))
            raise InvalidInput(f"unknown form field {self.field_name!r} (fields: {known})")
        self.fields += 1
        if self.fields > MAX_FIELDS:
            raise InvalidInput(f"a form carries at most {MAX_FIELDS} text fields")

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        piece = data[start:end]
        upload = self.upload
        if upload is None:
            cap = self.max_content if self.field_name == "content" else FIELD_BYTES
            if len(self.data) + len(piece) > cap:
                raise PayloadTooLarge(f"form field {self.field_name!r} is over {cap} bytes")
            self.data += piece
            return
        upload.size += len(piece)
        self.total += len(piece)
        if upload.size > self.limits.part_bytes:
            raise PayloadTooLarge(f"a part is over the limit of {self.limits.part_bytes} bytes")
        if self.total > self.limits.input_bytes:
            raise PayloadTooLarge(
                f"the parts of an input are over the limit of {self.limits.input_bytes} bytes"
            )
        if len(upload.head) < SNIFF_BYTES:
            upload.head += piece[: SNIFF_BYTES - len(upload.head)]
            if upload.kind == "image" and len(upload.head) >= SNIFF_BYTES:
                self._check_image_head(upload)
        upload.digest.update(piece)
        self.pending.append((self.handles[-1], piece))

    def _check_image_head(self, upload: Upload) -> None:
        media = sniff(upload.head)
        if not media.startswith("image/"):
            raise UnsupportedMedia(f"an image part is not an image (its bytes are {media})")

    def on_part_end(self) -> None:
        upload = self.upload
        if upload is not None:
            if upload.kind == "image" and len(upload.head) < SNIFF_BYTES:
                self._check_image_head(upload)
            self.last = "file"
            return
        try:
            value = self.data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"form field {self.field_name!r}: not UTF-8 (byte {exc.start})") from None
        if self.field_name == "text":
            if self.last != "file" or self.form.uploads[-1].text is not None:
                raise InvalidInput('a "text" field gives the text of the file right before it')
            self.form.uploads[-1].text = value
        elif self.field_name in self.form.fields:
            raise InvalidInput(f"form field {self.field_name!r} given twice")
        else:
            self.form.fields[self.field_name] = value
        self.last = self.field_name

    def flush(self) -> None:
        """Write the file bytes received so far (called off the event loop)."""
        for handle, piece in self.pending:
            handle.write(piece)
        self.pending.clear()

    def close(self) -> None:
        for handle in self.handles:
            handle.close()


def boundary_of(content_type: str) -> bytes:
    """The multipart boundary of a ``Content-Type`` header (InvalidInput without one)."""
    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise InvalidInput("a multipart/form-data body needs a boundary in its Content-Type")
    return boundary


async def read_form(
    stream: AsyncIterator[bytes], content_type: str, folder: Path, limits: Limits, *, max_content: int
) -> Form:
    """The form of a streamed ``multipart/form-data`` body, its files written to
    ``folder`` as they arrive; refused (InvalidInput, PayloadTooLarge,
    UnsupportedMedia) at the first byte over a limit, reading no further."""
    reader = _Reader(folder, limits, max_content)
    parser = MultipartParser(
        boundary_of(content_type),
        {
            "on_part_begin": reader.on_part_begin,
            "on_part_data": reader.on_part_data,
            "on_part_end": reader.on_part_end,
            "on_header_field": reader.on_header_field,
            "on_header_value": reader.on_header_value,
            "on_header_end": reader.on_header_end,
            "on_headers_finished": reader.on_headers_finished,
        },
    )
    try:
        async for chunk in stream:
            try:
                parser.write(chunk)
            except (InvalidInput, PayloadTooLarge, UnsupportedMedia):
                raise
            except Exception as exc:  # python-multipart's own errors: a malformed body
                raise InvalidInput(f"malformed multipart/form-data body: {exc}") from None
            if reader.pending:
                await asyncio.to_thread(reader.flush)
        try:
            parser.finalize()
        except Exception as exc:
            raise InvalidInput(f"malformed multipart/form-data body: {exc}") from None
    finally:
        reader.close()
    return reader.form


def spool_folder() -> tempfile.TemporaryDirectory[str]:
    """A private temporary directory for one upload's files (removed on exit)."""
    return tempfile.TemporaryDirectory(prefix="dormant-upload-")
