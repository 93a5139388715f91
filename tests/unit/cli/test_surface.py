"""The command line does not move: every command and flag that shipped is still there.

``surface.json`` is the surface as released (command path -> its flags). A command or
flag may be added; removing or renaming one breaks users' scripts, so this test fails
until the change is made on purpose (and listed in CHANGELOG.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from dormant.cli.main import app

PINNED = Path(__file__).with_name("surface.json")


def surface(command: Any, prefix: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every command under ``command`` (space-separated path) with its flags, sorted."""
    found: dict[str, list[str]] = {}
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        path = (*prefix, name)
        found[" ".join(path)] = sorted(
            opt
            for param in getattr(sub, "params", [])
            for opt in getattr(param, "opts", [])
            if opt.startswith("-")
        )
        found.update(surface(sub, path))
    return found


def test_no_shipped_command_or_flag_is_gone() -> None:
    pinned: dict[str, list[str]] = json.loads(PINNED.read_text())
    now = surface(typer.main.get_command(app))
    missing = {path: sorted(set(flags) - set(now.get(path, []))) for path, flags in pinned.items()}
    assert [path for path in pinned if path not in now] == []
    assert {path: flags for path, flags in missing.items() if flags} == {}


def test_the_surface_is_read_from_the_real_app() -> None:
    now = surface(typer.main.get_command(app))
    assert {"run", "serve", "memory add", "tenants keys create", "bench scale"} <= set(now)
    assert "--store" in now["run"]
