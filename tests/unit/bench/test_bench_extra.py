"""The benchmarks sit behind the ``bench`` extra: a plain install pulls no
matplotlib, the CLI never imports it unless a benchmark runs, and ``dormant bench ...``
without the extra says what to install."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dormant.bench.extra import INSTALL_HINT, missing_bench_packages
from dormant.cli.main import app

ROOT = Path(__file__).resolve().parents[3]


def _names(requirements: list[str]) -> set[str]:
    return {r.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}


def test_matplotlib_is_in_the_bench_extra_and_not_a_plain_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "matplotlib" not in _names(project["dependencies"])
    assert "matplotlib" in _names(project["optional-dependencies"]["bench"])


def test_the_makefile_installs_the_bench_extra() -> None:
    assert "-e '.[bench,dev,peers,multilingual]'" in (ROOT / "Makefile").read_text()
    locked = (ROOT / "requirements.lock").read_text().split()
    assert any(line.startswith("matplotlib==") for line in locked)
    # the peers extra's pins are the lock's: the dev environment runs `bench peers`
    for pin in (
        "langgraph==1.2.22",
        "langgraph-checkpoint-sqlite==3.1.2",
        "langgraph-checkpoint-postgres==3.2.0",
    ):
        assert pin in locked and f'"{pin}"' in (ROOT / "pyproject.toml").read_text()


def test_the_cli_imports_no_matplotlib_until_a_benchmark_runs() -> None:
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from dormant.cli.main import app\n"
        "for args in (['--help'], ['bench', '--help'], ['bench', 'scale', '--help']):\n"
        "    assert CliRunner().invoke(app, args).exit_code == 0, args\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_extra_is_found_in_the_development_environment() -> None:
    assert missing_bench_packages() == []


@pytest.mark.parametrize(
    "args",
    [
        ["bench", "scale", "--agents", "2", "--turns", "1", "--wave", "2"],
        ["bench", "plot", "nowhere"],
        ["bench", "context", "--messages", "200"],
        ["bench", "chaos", "--kills", "0"],
    ],
)
def test_bench_without_the_extra_says_what_to_install_before_doing_anything(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what a plain install looks like to import
    assert missing_bench_packages() == ["matplotlib"]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert INSTALL_HINT in text
    assert f"`dormant {args[0]} {args[1]}` needs the bench extra (matplotlib not installed" in text
    assert not out.exists(), "nothing ran"
