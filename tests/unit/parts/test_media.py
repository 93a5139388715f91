"""Content parts: sniffing, image checks (bomb, truncation, downscale), PDFs, costs, placeholders."""

from __future__ import annotations

from pathlib import Path

import pytest

from dormant.errors import PayloadTooLarge, UnsupportedMedia
from dormant.parts import File, Limits, image_tokens, placeholder
from dormant.parts.media import check_file, check_image, sniff
from dormant.parts.render import parts_tokens, text_of
from dormant.records import Message, Part
from dormant.tokens import count_text
from dormant.view.builder import message_bytes, message_tokens, token_bound
from tests.media_samples import bomb_png, jpeg, pdf, png


def test_the_media_type_comes_from_the_bytes() -> None:
    assert sniff(png()) == "image/png"
    assert sniff(jpeg()) == "image/jpeg"
    assert sniff(pdf()) == "application/pdf"
    assert sniff(b'{"a": [1, 2]}') == "application/json"
    assert sniff(b"a,b\n1,2\n") == "text/plain"
    assert sniff(b"MZ\x90\x00\x03\x00\x00\x00" + bytes(64)) == "application/octet-stream"


def test_an_executable_named_like_a_jpeg_is_refused_as_an_image() -> None:
    with pytest.raises(UnsupportedMedia, match="not an image"):
        check_image(b"MZ\x90\x00" + bytes(200), Limits())


def test_a_truncated_png_is_refused() -> None:
    with pytest.raises(UnsupportedMedia, match="truncated"):
        check_image(png(200, 200)[:80], Limits())


def test_a_decompression_bomb_is_refused_before_it_is_decoded() -> None:
    with pytest.raises(PayloadTooLarge, match=r"bomb|over the limit"):
        check_image(bomb_png(), Limits())
    with pytest.raises(PayloadTooLarge, match="over the limit"):
        check_image(png(200, 200), Limits(image_pixels=10_000))


def test_a_large_image_is_downscaled_to_the_longest_side() -> None:
    found = check_image(png(3000, 1000), Limits(image_max_side=1024))
    assert (found.width, found.height, found.media_type) == (1024, 341, "image/png")
    assert sniff(found.data) == "image/png"
    kept = check_image(png(300, 100), Limits(image_max_side=1024))
    assert (kept.width, kept.height) == (300, 100)
    assert kept.data == png(300, 100)  # small enough: the bytes as sent


def test_a_pdf_has_its_text_extracted_and_its_pages_bounded() -> None:
    assert check_file(pdf("Invoice 4711"), Limits()).text == "Invoice 4711"
    with pytest.raises(PayloadTooLarge, match="12 pages"):
        check_file(pdf(pages=12), Limits(pdf_pages=10))
    with pytest.raises(UnsupportedMedia, match="PDF"):
        check_file(b"%PDF-1.4\n garbage", Limits())


def test_image_cost_follows_the_tile_rule() -> None:
    assert image_tokens(1024, 1024, "low") == 85
    assert image_tokens(1024, 1024, "high") == 85 + 170 * 4  # 768 x 768: 2 x 2 tiles
    assert image_tokens(2048, 4096, "high") == 85 + 170 * 6  # 768 x 1536: 2 x 3 tiles
    assert image_tokens(100, 100, "auto") == 85 + 170


IMAGE = Part(kind="image", ref="sha256:" + "a" * 64, media_type="image/jpeg", size=9, width=1024, height=768)


def test_a_text_only_model_gets_a_placeholder() -> None:
    named = Part(
        kind="image",
        ref=IMAGE.ref,
        media_type="image/jpeg",
        size=9,
        width=1024,
        height=768,
        name="parcel.jpg",
    )
    assert placeholder(named) == "[image: parcel.jpg, 1024\N{MULTIPLICATION SIGN}768, no text]"
    pdf_part = Part(
        kind="file", ref=IMAGE.ref, media_type="application/pdf", size=99, name="i.pdf", text="No 4711"
    )
    assert placeholder(pdf_part) == "[file: i.pdf, application/pdf, 99 bytes]\nNo 4711"
    message = Message(seq=1, role="user", content="look", parts=(named,))
    assert text_of(message) == "look\n\n[image: parcel.jpg, 1024\N{MULTIPLICATION SIGN}768, no text]"


def test_the_budget_counts_an_image_by_its_tiles() -> None:
    plain = Message(seq=1, role="user", content="look at this")
    with_image = Message(seq=1, role="user", content="look at this", parts=(IMAGE,))
    extra = message_tokens(with_image) - message_tokens(plain)
    assert extra >= image_tokens(1024, 768, "high")
    assert extra == parts_tokens((IMAGE,), count_text)
    # the bounds that stand in for a count still hold
    assert token_bound(with_image) >= message_tokens(with_image)
    assert 4 * message_bytes(with_image) >= message_tokens(with_image)


def test_a_path_parts_checked_bytes_are_dropped_and_read_again_unchanged(tmp_path: Path) -> None:
    from dormant.errors import InvalidInput
    from dormant.parts.admit import check, reread

    path = tmp_path / "invoice.pdf"
    path.write_bytes(pdf("No 9"))
    passed = check(File(path), Limits())
    assert passed.checked.data == b"" and passed.size == len(pdf("No 9")) and passed.reread is not None
    assert passed.checked.text == "No 9" and passed.name == "invoice.pdf"
    assert reread(File(path), Limits(), passed.reread) == pdf("No 9")
    path.write_bytes(pdf("No 10"))  # changed between its check and its store: refused
    with pytest.raises(InvalidInput, match="changed"):
        reread(File(path), Limits(), passed.reread)
    kept = check(File(pdf("No 9")), Limits())  # bytes given: kept as they are
    assert kept.checked.data == pdf("No 9") and kept.reread is None


async def test_an_opaque_file_path_is_hashed_and_stored_in_pieces_never_whole(tmp_path: Path) -> None:
    import hashlib

    from dormant.errors import InvalidInput, NotFound
    from dormant.parts.admit import PIECE, check, file_pieces, store_parts
    from dormant.store import open_store

    path = tmp_path / "archive.bin"
    data = b"\x00\x01" + bytes(range(256)) * (3 * PIECE // 256)
    path.write_bytes(data)
    passed = check(File(path), Limits())
    assert passed.streamed and passed.checked.data == b"" and passed.size == len(data)
    assert passed.reread == hashlib.sha256(data).hexdigest() and passed.name == "archive.bin"
    assert max(len(p) for p in file_pieces(path, len(data))) == PIECE
    text = tmp_path / "notes.txt"  # text has its text extracted: read whole, as before
    text.write_bytes(b"plain words")
    assert not check(File(text), Limits()).streamed
    store = open_store("memory://")
    await store.open()
    try:
        _, (part,) = await store_parts(store, "t1", [File(path)], Limits(), agent="a")
        assert part.size == len(data) and part.ref == f"sha256:{passed.reread}"
        assert part.media_type == "application/octet-stream"
        changed = data[:-1] + b"\x07"
        path.write_bytes(changed)  # changed between its check and its store: refused, nothing stored
        with pytest.raises(InvalidInput, match="changed"):
            await store.put_blob("t1", file_pieces(path, len(data), passed.reread))
        with pytest.raises(NotFound):
            await store.get_blob("t1", f"sha256:{hashlib.sha256(changed).hexdigest()}")
    finally:
        await store.close()
