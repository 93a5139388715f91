"""``dormant send THREAD TEXT --attach FILE``: attachments stored as parts, refusals said."""

from __future__ import annotations

from pathlib import Path

import apsw
from typer.testing import CliRunner

from dormant.cli.main import app
from dormant.store.rows import PARTS
from tests.media_samples import pdf, png


def test_send_attaches_images_and_files(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/d.db"
    photo, invoice = tmp_path / "photo.png", tmp_path / "invoice.pdf"
    photo.write_bytes(png(120, 80))
    invoice.write_bytes(pdf("Total 42"))
    done = CliRunner().invoke(
        app, ["send", "t1", "see attached", "--store", url, "--attach", str(photo), "--attach", str(invoice)]
    )
    assert done.exit_code == 0, done.output

    conn = apsw.Connection(f"{tmp_path}/d.db")
    ((content, raw),) = conn.execute("SELECT content, parts FROM inputs WHERE thread_id = 't1'").fetchall()
    conn.close()
    facts = [f"{p.kind}:{p.media_type}:{p.name}:{p.text}" for p in PARTS.decode(str(raw))]
    assert content == "see attached"
    assert facts == ["image:image/png:photo.png:None", "file:application/pdf:invoice.pdf:Total 42"]
    ran = CliRunner().invoke(app, ["run", "--store", url, "--until-idle"])
    assert ran.exit_code == 0, ran.output
    shown = CliRunner().invoke(app, ["show", "t1", "--store", url])
    assert shown.exit_code == 0, shown.output
    assert "[image: photo.png, image/png, " in shown.output and "80x" not in shown.output
    assert "120x80]" in shown.output and "[file: invoice.pdf, application/pdf" in shown.output
    fake = tmp_path / "fake.jpg"
    fake.write_bytes(png(10, 10)[:40])
    refused = CliRunner().invoke(app, ["send", "t1", "x", "--store", url, "--attach", str(fake)])
    assert refused.exit_code != 0 and "truncated" in refused.output


def test_export_writes_each_parts_bytes_once_beside_the_jsonl(tmp_path: Path) -> None:
    import asyncio
    import hashlib
    import json
    import os

    from dormant import Agent, Runtime
    from dormant.models import echo_model
    from dormant.parts import File, Image

    url = f"sqlite:///{tmp_path}/d.db"
    photo, invoice, big = png(120, 80), pdf("Total 42"), os.urandom(3 * 1024 * 1024 + 5)  # big: 4 reads

    async def fill() -> None:
        async with Runtime(url, [Agent(name="assistant", model=echo_model())]) as rt:
            await rt.send("t1", "the parcel", parts=[Image(photo, name="p.png"), File(invoice, name="i.pdf")])
            await rt.run_until_idle()
            await rt.send("t1", "again, and a dump", parts=[Image(photo), File(big, name="core")])
            await rt.run_until_idle()

    asyncio.run(fill())
    out = tmp_path / "export" / "t1.jsonl"
    out.parent.mkdir()
    done = CliRunner().invoke(app, ["export", "t1", "--store", url, "--out", str(out)])
    assert done.exit_code == 0, done.output
    assert "3 part file(s) written" in done.output and "1 already there" in done.output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    listed = [p for line in lines for p in line["parts"]]
    assert [p["media_type"] for p in listed] == [
        "image/png",
        "application/pdf",
        "image/png",
        "application/octet-stream",
    ]
    for part in listed:
        digest = part["ref"].removeprefix("sha256:")
        assert part["file"].startswith(f"parts/{digest}.")
        data = (out.parent / part["file"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest and len(data) == part["size"]
    assert [p["file"].rsplit(".", 1)[1] for p in listed] == ["png", "pdf", "png", "bin"]
    assert (out.parent / listed[3]["file"]).read_bytes() == big
    assert sorted(p.name for p in (out.parent / "parts").iterdir()) == sorted({p["file"][6:] for p in listed})
    again = CliRunner().invoke(app, ["export", "t1", "--store", url, "--out", str(out)])
    assert "0 part file(s) written" in again.output and "4 already there" in again.output
    to_stdout = CliRunner().invoke(app, ["export", "t1", "--store", url])
    assert "the bytes of 4 image(s) and file(s) were not written: give --parts-dir" in to_stdout.output
    elsewhere = tmp_path / "blobs"
    given = CliRunner().invoke(
        app, ["export", "t1", "--store", url, "--parts-dir", str(elsewhere), "--quiet"]
    )
    first = json.loads(given.stdout.splitlines()[0])
    assert first["parts"][0]["file"] == f"{elsewhere}/{listed[0]['ref'][7:]}.png"
    assert len(list(elsewhere.iterdir())) == 3


async def test_exporting_a_large_part_holds_a_few_reads_of_it_at_most(tmp_path: Path) -> None:
    import os
    import tracemalloc

    from dormant import Agent, Runtime
    from dormant.cli.history import export_history
    from dormant.models import echo_model
    from dormant.ops.partfiles import PartFiles
    from dormant.parts import File

    size = 16 * 1024 * 1024
    async with Runtime(f"sqlite:///{tmp_path}/d.db", [Agent(name="assistant", model=echo_model())]) as rt:
        await rt.send("t1", "a dump", parts=[File(os.urandom(size), name="core")])
        await rt.run_until_idle()
        files = PartFiles(rt.store, tmp_path / "parts", "parts")
        tracemalloc.start()
        try:
            await export_history(rt.store, "t1", lambda line: None, parts=files)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert files.written == 1 and files.bytes == size
    assert peak < 4 * 1024 * 1024, peak  # 1 MiB reads, never the 16 MiB
