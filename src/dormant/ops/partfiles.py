"""The files an export writes beside its JSONL: the bytes of each image and file part.

``dormant export`` names each part's bytes by their SHA-256 and media type
(``parts/<hex>.png``) and writes them with :class:`PartFiles`: streamed from the blob
store in :data:`~dormant.tools.blobs.MAX_READ` pieces (never whole in RAM), checked
against the hash as they go, written to a temporary file and renamed into place, so a
file present under its name is whole. A blob several messages (or an earlier, resumed
export) refer to is written once: a file already there with the right size is kept.
Nothing is remembered between parts, so the work is bounded whatever the thread's size.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import DormantError, UsageError
from ..records import Part
from ..store import Store
from ..tools.blobs import MAX_READ

#: The extension of a part's file, by its (sniffed) media type; others get ``.bin``.
EXTENSIONS = {
    "image/png": ".png",
    "image/jpeg": ".jpg",
    "image/webp": ".webp",
    "image/gif": ".gif",
    "application/pdf": ".pdf",
    "application/json": ".json",
    "text/plain": ".txt",
    "text/csv": ".csv",
}


def file_name(part: Part) -> str:
    """The file a part's bytes are written to: its SHA-256 in hex and an extension."""
    digest = part.ref.removeprefix("sha256:")
    return digest + EXTENSIONS.get(part.media_type, ".bin")


@dataclass(slots=True)
class PartFiles:
    """Writes the bytes of parts into ``folder`` (made when the first part comes), and
    says how a JSONL line names each file (``shown``: the folder as the line shows it)."""

    store: Store
    folder: Path
    shown: str
    #: files written by this export, their bytes, and parts whose file was already there
    written: int = 0
    bytes: int = 0
    kept: int = 0

    def path_of(self, part: Part) -> str:
        """How a JSONL line names ``part``'s file."""
        return f"{self.shown.rstrip('/')}/{file_name(part)}" if self.shown else file_name(part)

    async def write(self, thread_id: str, part: Part) -> str:
        """Write ``part``'s bytes (as ``thread_id`` may read them) unless its file is there
        whole; answers the name :meth:`path_of` gives. Raises NotFound for a blob the
        thread cannot see, DormantError when the bytes do not match their hash or the
        file cannot be written."""
        target = self.folder / file_name(part)
        if target.is_file() and target.stat().st_size == part.size:
            self.kept += 1
            return self.path_of(part)
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=f".{target.name}.", suffix=".tmp")
        except OSError as exc:
            raise UsageError(
                f"cannot write part files in {str(self.folder)!r}: {exc.strerror or exc}"
            ) from exc
        try:
            digest = hashlib.sha256()
            size = 0
            with os.fdopen(fd, "wb") as out:
                while size < part.size:
                    piece = await self.store.read_blob(thread_id, part.ref, size, MAX_READ)
                    if not piece:
                        break
                    digest.update(piece)
                    out.write(piece)
                    size += len(piece)
                out.flush()
                os.fsync(out.fileno())
            if f"sha256:{digest.hexdigest()}" != part.ref or size != part.size:
                raise DormantError(f"the stored bytes of {part.ref} do not match it ({size} bytes read)")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self.written += 1
        self.bytes += size
        return self.path_of(part)
