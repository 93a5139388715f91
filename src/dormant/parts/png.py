"""PNG files whose optional chunks are damaged: the damaged chunks dropped, nothing else.

A PNG is a signature and a list of chunks, each with a CRC. Pillow refuses a file with
any bad CRC; other decoders (browsers, the model servers) skip a bad *ancillary* chunk
(a colour profile, metadata: a type whose first letter is lower case), since the image
does not depend on it. Real files have them: the reference MCP server's sample image
carries an ``iCCP`` chunk with a wrong CRC. :func:`without_bad_ancillary` drops such
chunks so the image is checked (and stored) as those decoders see it; a bad critical
chunk (``IHDR``, ``IDAT``, ...) or a truncated file is left as it is, for the checks to
refuse.
"""

from __future__ import annotations

import zlib

SIGNATURE = b"\x89PNG\r\n\x1a\n"


def without_bad_ancillary(data: bytes) -> bytes:
    """``data`` without its ancillary chunks whose CRC is wrong (``data`` itself when
    there are none, or when it is not a whole PNG)."""
    if not data.startswith(SIGNATURE):
        return data
    keep: list[memoryview] = []
    view = memoryview(data)
    pos, dropped = len(SIGNATURE), False
    keep.append(view[:pos])
    while pos + 12 <= len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        end = pos + 12 + length
        if end > len(data):
            return data  # truncated: left for the decoder to refuse
        kind = data[pos + 4 : pos + 8]
        crc = int.from_bytes(data[end - 4 : end], "big")
        if crc != zlib.crc32(view[pos + 4 : end - 4]) and kind[:1].islower():
            dropped = True
        else:
            keep.append(view[pos:end])
        pos = end
        if kind == b"IEND":
            break
    return b"".join(keep) + data[pos:] if dropped else data
