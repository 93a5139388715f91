"""A PNG whose optional chunk has a wrong CRC is taken without that chunk; a damaged
critical chunk or a truncated file is still refused."""

from __future__ import annotations

import struct
import zlib

import pytest

from dormant.errors import UnsupportedMedia
from dormant.parts import Limits
from dormant.parts.media import check_image
from dormant.parts.png import SIGNATURE, without_bad_ancillary
from tests.media_samples import png


def chunk(kind: bytes, body: bytes, crc: int | None = None) -> bytes:
    value = zlib.crc32(kind + body) if crc is None else crc
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", value & 0xFFFFFFFF)


def with_chunk(data: bytes, extra: bytes) -> bytes:
    """``data`` (a PNG) with ``extra`` inserted right after its IHDR chunk."""
    at = len(SIGNATURE) + 25
    return data[:at] + extra + data[at:]


def test_a_bad_ancillary_chunk_is_dropped_and_the_image_taken() -> None:
    good = png(30, 20)
    broken = with_chunk(good, chunk(b"tEXt", b"Comment\x00hello", crc=1))
    assert without_bad_ancillary(broken) == good
    checked = check_image(broken, Limits())
    assert (checked.width, checked.height, checked.data) == (30, 20, good)
    sound = with_chunk(good, chunk(b"tEXt", b"Comment\x00hello"))
    assert without_bad_ancillary(sound) is sound  # nothing to drop: the same bytes


def test_a_bad_critical_chunk_or_a_truncated_file_is_still_refused() -> None:
    good = png(30, 20)
    ihdr = bytearray(good)
    ihdr[29] ^= 0xFF  # the IHDR chunk's CRC
    assert without_bad_ancillary(bytes(ihdr)) == bytes(ihdr)
    truncated = with_chunk(good, chunk(b"tEXt", b"x" * 40, crc=1))[:60]
    assert without_bad_ancillary(truncated) == truncated
    for data in (bytes(ihdr), truncated):
        with pytest.raises(UnsupportedMedia):
            check_image(data, Limits())
