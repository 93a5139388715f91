"""Admission of parts: every part checked first, then its blob stored (once by content)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import InvalidInput, PayloadTooLarge
from ..records import BlobRef, Part
from .extract import Extractor, log
from .inputs import File, Image, Limits, PartInput, Text, read_source
from .media import Checked, check_file, check_image, sniff


class BlobWriter(Protocol):
    """What :func:`store_parts` needs of a store (:meth:`Store.put_blob`)."""

    async def put_blob(self, thread_id: str, chunks: AsyncIterable[bytes] | Iterable[bytes]) -> BlobRef:
        """Store ``chunks`` as one blob referred to by ``thread_id``."""
        ...

    async def create_thread(self, thread_id: str, agent: str) -> Any:
        """Create the thread if it does not exist."""
        ...

    async def part_bytes_today(self, thread_id: str) -> int:
        """Bytes of the parts ``thread_id`` took since the start of the UTC day."""
        ...


#: Bytes of one stored piece handed to the blob store (its own chunking decides the rest).
PIECE = 256 * 1024


def _pieces(data: bytes) -> Iterator[bytes]:
    view = memoryview(data)
    for at in range(0, len(data), PIECE):
        yield bytes(view[at : at + PIECE])


@dataclass(frozen=True, slots=True)
class Passed:
    """A part that passed its checks. A file's bytes that were stored as they are read
    are dropped (``reread``: their SHA-256, the file read again when stored), so RAM
    holds one part's bytes at a time, not all of an input's."""

    checked: Checked
    name: str | None
    size: int
    reread: str | None = None
    #: an opaque file read in pieces, never whole: stored the same way (:func:`file_pieces`)
    streamed: bool = False


#: Bytes of a file's head that tell whether it is opaque (sniffed: a NUL in its first 8 KiB).
HEAD_BYTES = 8192


def _opaque_path(part: Image | File) -> bool:
    """Whether ``part`` is a file path whose head alone makes it an opaque file (no
    magic number, a NUL in its first 8 KiB: what :func:`sniff` of all its bytes says)."""
    if not isinstance(part, File) or isinstance(part.source, bytes):
        return False
    try:
        with open(part.source, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return False  # read_source says why
    return b"\x00" in head and sniff(head) == "application/octet-stream"


def file_pieces(path: str | os.PathLike[str], limit: int, digest: str | None = None) -> Iterator[bytes]:
    """The bytes of the file at ``path`` in :data:`PIECE` pieces (PayloadTooLarge past
    ``limit``). With ``digest``, the SHA-256 of all of them is checked at the end, before
    the iteration ends: InvalidInput if the file changed (a blob put then stores nothing)."""
    sha = hashlib.sha256()
    size = 0
    with open(path, "rb") as fh:
        while piece := fh.read(PIECE):
            size += len(piece)
            if size > limit:
                raise PayloadTooLarge(f"part {os.path.basename(path)!r} is over the limit of {limit} bytes")
            sha.update(piece)
            yield piece
    if digest is not None and sha.hexdigest() != digest:
        raise InvalidInput(f"part {os.path.basename(path)!r} changed while it was being sent")


def check(part: Image | File, limits: Limits) -> Passed:
    """One part's bytes read (bounded) and checked; its name (the caller's, else the path's)."""
    if _opaque_path(part):  # nothing to decode or extract: hashed in pieces, never whole in RAM
        assert not isinstance(part.source, bytes)
        sha, size = hashlib.sha256(), 0
        for piece in file_pieces(part.source, limits.part_bytes):
            sha.update(piece)
            size += len(piece)
        found = Checked("file", b"", "application/octet-stream")
        return Passed(found, part.name or os.path.basename(part.source), size, sha.hexdigest(), streamed=True)
    data, path_name = read_source(part.source, limits.part_bytes)
    checked = check_image(data, limits) if isinstance(part, Image) else check_file(data, limits)
    name = part.name or path_name
    if isinstance(part.source, bytes) or checked.data is not data:
        return Passed(checked, name, len(checked.data))
    digest = hashlib.sha256(data).hexdigest()
    return Passed(replace(checked, data=b""), name, len(data), digest)


def reread(part: Image | File, limits: Limits, digest: str) -> bytes:
    """The bytes of a part's file again, refused (nothing of it stored) if they changed."""
    data, _ = read_source(part.source, limits.part_bytes)
    if hashlib.sha256(data).hexdigest() != digest:
        raise InvalidInput(f"part {part.name or str(part.source)!r} changed while it was being sent")
    return data


async def store_parts(
    store: BlobWriter,
    thread_id: str,
    parts: Sequence[PartInput],
    limits: Limits,
    agent: str | None = None,
    extractor: Extractor | None = None,
) -> tuple[str, tuple[Part, ...]]:
    """The text and the stored parts of an input made of ``parts``.

    Every part is read and checked off the event loop before anything is stored: a
    refused one (InvalidInput, PayloadTooLarge, UnsupportedMedia) leaves nothing
    behind. Then each part's bytes go to the blob store, keyed by their SHA-256 (the
    same bytes twice are one blob), and the part keeps the reference and its facts.
    With ``agent``, a missing thread is created (with that agent) once all parts passed.
    Before that, the parts the thread took since the start of the UTC day plus these must
    stay within ``limits.thread_day_bytes`` (PayloadTooLarge, nothing written).
    With an ``extractor`` that reads images (OCR), an image given without alt text gets
    the text OCR finds in it, once every part passed and before its blob is stored; OCR
    that fails or times out leaves the part without text, never refuses it.
    """
    media = [p for p in parts if not isinstance(p, Text)]
    if len(media) > limits.count:
        raise InvalidInput(f"an input carries at most {limits.count} images and files, not {len(media)}")
    for p in parts:
        if not isinstance(p, Text | Image | File):
            raise InvalidInput(f"a part is a Text, an Image or a File, not {type(p).__name__}")
    text = "\n\n".join(p.text for p in parts if isinstance(p, Text) and p.text)
    checked: list[tuple[Passed, Image | File]] = []
    total = 0
    for p in media:
        assert isinstance(p, Image | File)
        passed = await asyncio.to_thread(check, p, limits)
        total += passed.size
        if total > limits.input_bytes:
            raise PayloadTooLarge(f"the parts of an input are over the limit of {limits.input_bytes} bytes")
        checked.append((passed, p))
    if checked and limits.thread_day_bytes:
        used = await store.part_bytes_today(thread_id)
        if used + total > limits.thread_day_bytes:
            raise PayloadTooLarge(
                f"thread {thread_id!r} took {used} bytes of images and files today (UTC); {total} more "
                f"would pass its daily limit of {limits.thread_day_bytes} bytes"
            )
    out: list[Part] = []
    if checked and agent is not None:
        await store.create_thread(thread_id, agent)
    for passed, p in checked:
        found, name = passed.checked, passed.name
        given = p.alt if isinstance(p, Image) else p.text
        if passed.streamed:
            assert not isinstance(p.source, bytes)
            ref = await store.put_blob(thread_id, file_pieces(p.source, limits.part_bytes, passed.reread))
        else:
            data = (
                found.data
                if passed.reread is None
                else await asyncio.to_thread(reread, p, limits, passed.reread)
            )
            if given is None and found.kind == "image" and extractor is not None and extractor.ocr:
                given = await extractor.image_text(data)
            ref = await store.put_blob(thread_id, _pieces(data))
            del data
        if found.problem is not None:
            if extractor is not None:
                extractor.pdf_problem(name, found.problem)
            else:
                log.warning("pdf_text_skipped %s: %s (stored without text)", name or "a PDF", found.problem)
        out.append(
            Part(
                kind="image" if found.kind == "image" else "file",
                ref=ref.ref,
                media_type=found.media_type,
                size=ref.size,
                width=found.width,
                height=found.height,
                name=name,
                text=given if given is not None else found.text,
            )
        )
    return text, tuple(out)
