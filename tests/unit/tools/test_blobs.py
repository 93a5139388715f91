"""Blobs without a database: chunking, excerpts, stash, tool outputs and the read_blob tool
(against the in-memory store)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from dormant.errors import NotFound, UsageError
from dormant.records import BlobRef
from dormant.store.sqlite import SQLiteStore
from dormant.tools.blobs import (
    CHUNK_BYTES,
    EXCERPT_BYTES,
    Chunker,
    Pieces,
    chunk_span,
    excerpt,
    read_length,
    stash,
    whole_chars,
)
from dormant.tools.builtins import read_blob
from dormant.tools.spec import ToolContext, file_output, make_tool, result_output

REF = re.compile(r"sha256:[0-9a-f]{64}")


class Recorder:
    """A BlobWriter that hashes and counts what it is given, keeping nothing."""

    def __init__(self) -> None:
        self.puts: list[BlobRef] = []
        self.largest_piece = 0

    async def put_blob(self, thread_id: str, chunks: Pieces) -> BlobRef:
        digest = hashlib.sha256()
        size = 0
        assert not isinstance(chunks, list | tuple)
        async for piece in chunks:  # type: ignore[union-attr]
            digest.update(piece)
            size += len(piece)
            self.largest_piece = max(self.largest_piece, len(piece))
        ref = BlobRef(ref=f"sha256:{digest.hexdigest()}", size=size)
        self.puts.append(ref)
        return ref


@pytest.fixture
async def store() -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore("memory://")
    await s.open()
    await s.create_thread("t1", "a")
    yield s
    await s.close()


def ctx(store: SQLiteStore | None, **overrides: Any) -> ToolContext:
    values: dict[str, Any] = {"thread_id": "t1", "call_id": "c1", "agent": "a", "blobs": store}
    values.update(overrides)
    return ToolContext(**values)


# -- chunking and ranges ------------------------------------------------------------


async def test_chunker_cuts_pieces_of_any_size_into_fixed_chunks_in_bounded_batches() -> None:
    data = bytes(range(256)) * 5000  # 1,280,000 bytes
    chunker = Chunker(chunk_bytes=100_000, batch_bytes=300_000)
    pieces: list[Any] = [data[:7], memoryview(data[7:250_001]), bytearray(data[250_001:])]
    batches = [b async for b in chunker.batches(pieces)]
    assert [len(b) for b in batches] == [3, 3, 3, 3, 1]
    chunks = [c for b in batches for c in b]
    assert [i for i, _ in chunks] == list(range(13))
    assert all(len(c) == 100_000 for _, c in chunks[:-1]) and len(chunks[-1][1]) == 80_000
    assert b"".join(c for _, c in chunks) == data
    assert chunker.blob == BlobRef(ref="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data))


async def test_chunker_refuses_pieces_that_are_not_bytes() -> None:
    with pytest.raises(TypeError, match="int"):
        async for _ in Chunker().batches([b"ok", 5]):  # type: ignore[list-item]
            pass


def test_read_ranges() -> None:
    assert read_length(0, 10) == 10
    assert read_length(5, 10 * 1024 * 1024) == 1024 * 1024
    with pytest.raises(UsageError):
        read_length(-1, 10)
    with pytest.raises(UsageError):
        read_length(0, -1)
    assert chunk_span(0, 10, 100, 10) == range(0, 1)
    assert chunk_span(9, 2, 100, 10) == range(0, 2)
    assert chunk_span(95, 50, 100, 10) == range(9, 10)
    assert chunk_span(100, 5, 100, 10) == range(0)
    assert chunk_span(5, 0, 100, 10) == range(0)


# -- excerpts ---------------------------------------------------------------------------


def test_whole_chars_trims_characters_cut_by_a_range() -> None:
    text = "aé€😀z".encode()  # 1 + 2 + 3 + 4 + 1 bytes
    assert whole_chars(text) == (0, len(text))
    assert whole_chars(text[:4]) == (0, 3)  # "aé" and the first byte of €
    assert whole_chars(text[:9]) == (0, 6)  # 😀 cut after 3 of its bytes
    assert whole_chars(text[2:]) == (1, len(text) - 2)  # starts inside é
    assert whole_chars(text[2:], start=False) == (0, len(text) - 2)
    assert whole_chars(b"\x80\x80") == (0, 2)  # not UTF-8: left alone
    assert whole_chars(b"") == (0, 0)


def test_excerpt_names_the_blob_and_shows_head_and_tail() -> None:
    ref = BlobRef(ref="sha256:" + "ab" * 32, size=209_715_200)
    text = excerpt(ref, b"first line\nsecond", b"the end\n")
    first, head_1, head_2, rest = text.split("\n", 3)
    assert first == (
        f"[tool output stored as blob {ref.ref} — 209,715,200 bytes; showing the first 17 and last 8 "
        "bytes; read any part with read_blob(ref, offset, length)]"
    )
    assert (head_1, head_2) == ("first line", "second")
    assert rest == "[… 209,715,175 bytes cut …]\nthe end\n"


def test_excerpt_cuts_at_character_boundaries() -> None:
    head = ("x" * 2046 + "€").encode()[:EXCERPT_BYTES]  # € cut after its first byte
    tail = ("€" + "y" * 2047).encode()[-EXCERPT_BYTES:]  # € cut before its last two bytes
    text = excerpt(BlobRef(ref="sha256:" + "0" * 64, size=100_000), head, tail)
    assert "\ufffd" not in text
    assert "showing the first 2,046 and last 2,047 bytes" in text
    assert "[… 95,907 bytes cut …]" in text


def test_excerpt_of_a_blob_shorter_than_head_and_tail() -> None:
    text = excerpt(BlobRef(ref="sha256:" + "0" * 64, size=5), b"hello", b"")
    assert "showing the first 5 bytes;" in text and "cut" not in text
    assert text.endswith("\nhello")


# -- stash ------------------------------------------------------------------------------


async def test_stash_keeps_small_outputs_as_text() -> None:
    rec = Recorder()
    assert await stash(rec, "t1", "small", 1024) == "small"
    assert await stash(rec, "t1", "é" * 512, 1024) == "é" * 512  # exactly 1024 bytes
    assert await stash(rec, "t1", b"caf\xc3\xa9 \xff", 1024) == "café \ufffd"
    assert await stash(rec, "t1", iter([b"a", b"b"]), 1024) == "ab"

    async def gen() -> AsyncIterator[bytes]:
        yield b"x" * 1000
        yield b"y" * 24

    assert await stash(rec, "t1", gen(), 1024) == "x" * 1000 + "y" * 24
    assert rec.puts == []


@pytest.mark.parametrize("kind", ["str", "bytes", "async", "sync"])
async def test_stash_stores_large_outputs_and_returns_an_excerpt(kind: str) -> None:
    data = b"".join(b"line %06d\n" % n for n in range(40_000))  # 480,000 bytes
    output: Any
    if kind == "str":
        output = data.decode()
    elif kind == "bytes":
        output = data
    elif kind == "async":

        async def gen() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 1000):
                yield data[start : start + 1000]

        output = gen()
    else:
        output = (data[start : start + 3333] for start in range(0, len(data), 3333))
    rec = Recorder()
    text = await stash(rec, "t1", output, 16 * 1024)
    (ref,) = rec.puts
    assert ref == BlobRef(ref="sha256:" + hashlib.sha256(data).hexdigest(), size=len(data))
    assert REF.findall(text) == [ref.ref]
    assert text.split("\n", 1)[1].startswith(data[:EXCERPT_BYTES].decode())
    assert text.endswith(data[-EXCERPT_BYTES:].decode())
    assert f"[… {len(data) - 2 * EXCERPT_BYTES:,} bytes cut …]" in text
    assert len(text.encode()) < 5000
    if kind in ("str", "bytes"):  # fed to the store in chunks, not whole
        assert rec.largest_piece <= CHUNK_BYTES


async def test_stash_into_a_store_and_read_back(store: SQLiteStore) -> None:
    data = bytes(range(256)) * 4096  # 1 MiB, not UTF-8 text
    text = await stash(store, "t1", data, 16 * 1024)
    (ref,) = REF.findall(text)
    assert await store.read_blob("t1", ref, 1000, 300) == data[1000:1300]
    with pytest.raises(NotFound):
        await stash(store, "nobody", data, 16 * 1024)


# -- tool outputs -----------------------------------------------------------------------


async def test_tools_may_return_bytes_and_streams(tmp_path: Path) -> None:
    path = tmp_path / "out.bin"
    path.write_bytes(b"0123456789" * 100)

    async def from_file() -> Any:
        return file_output(path, chunk_bytes=64)

    def lines() -> Iterator[bytes]:
        yield b"one\n"
        yield b"two\n"

    for fn, expected in ((from_file, "0123456789" * 100), (lines, "one\ntwo\n")):
        spec = make_tool(fn)
        output = await spec.run({}, ctx(None))
        assert not isinstance(output, str | bytes)  # a stream, not read yet
        assert await spec.invoke({}, ctx(None)) == expected
    assert result_output(b"raw") == b"raw"
    assert result_output({"a": 1}) == '{"a":1}'
    assert result_output(["x"]) == '["x"]'
    with pytest.raises(FileNotFoundError):
        file_output(tmp_path / "missing")


# -- the read_blob tool ---------------------------------------------------------------


async def test_read_blob_pages_through_a_blob(store: SQLiteStore) -> None:
    data = ("é" * 10_000 + "fin").encode()  # 20,003 bytes
    blob = await store.put_blob("t1", [data])
    first = await read_blob(blob.ref, ctx(store), 0, 5001)  # would end inside an é
    assert first == "é" * 2500 + "\n[bytes 0-5000 of 20003; next offset 5000]"
    odd = await read_blob(blob.ref, ctx(store), 5001, 10)  # starts inside an é
    assert odd == "é" * 4 + "\n[bytes 5002-5010 of 20003; next offset 5010]"
    last = await read_blob(blob.ref, ctx(store), 19_990, 8192)
    assert last == "é" * 5 + "fin\n[bytes 19990-20003 of 20003; end of blob]"
    past = await read_blob(blob.ref, ctx(store), 30_000)
    assert past == "[nothing at offset 30000: the blob has 20003 bytes]"


async def test_read_blob_answers_stay_under_the_blob_threshold(store: SQLiteStore) -> None:
    binary = bytes(range(256)) * 400
    blob = await store.put_blob("t1", [binary])
    text = await read_blob(blob.ref, ctx(store, blob_threshold=4096), 0, 100_000)
    assert len(text.encode()) <= 4096
    end = int(re.findall(r"next offset (\d+)", text)[0])
    assert 1000 < end < 4096
    big = await read_blob(blob.ref, ctx(store, blob_threshold=10**9), 0, 100_000)
    assert len(big.encode()) <= 16 * 1024


async def test_read_blob_errors_are_results(store: SQLiteStore) -> None:
    await store.create_thread("t2", "a")
    theirs = await store.put_blob("t2", [b"secret"])
    assert (await read_blob(theirs.ref, ctx(store))).startswith("error: no blob")
    assert (await read_blob("sha256:ab12…", ctx(store))).startswith("error: no blob")
    assert (await read_blob(theirs.ref, ctx(store), -1)).startswith("error: offset")
    assert (await read_blob(theirs.ref, ctx(None))).startswith("error: no blob store")
