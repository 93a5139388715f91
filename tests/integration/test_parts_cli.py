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
