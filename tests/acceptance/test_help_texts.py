"""What ``--help`` says: every ``--store`` names each kind of store URL, no raw markup."""

from __future__ import annotations

from typing import Any

import typer.main

from dormant.cli.main import app

from .runner import Cli


def commands(group: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Every leaf command under ``group`` (typer's groups have ``commands``), by full name."""
    found: list[tuple[str, Any]] = []
    for name, command in group.commands.items():
        if hasattr(command, "commands"):
            found += commands(command, f"{prefix}{name} ")
        else:
            found.append((f"{prefix}{name}", command))
    return found


def test_every_store_option_names_sqlite_postgresql_and_memory() -> None:
    checked = 0
    for name, command in commands(typer.main.get_command(app)):
        for param in command.params:
            if "--store" in getattr(param, "opts", ()) and getattr(param, "envvar", None) == "DORMANT_STORE":
                text = param.help or ""
                for scheme in ("sqlite:///", "postgresql://", "memory://"):
                    assert scheme in text, (name, text)
                checked += 1
    assert checked >= 20  # every command on a store, not a few


def test_gc_help_shows_variables_without_markup(cli: Cli) -> None:
    shown = cli("gc", "--help", store=False).stdout
    assert "DORMANT_RETENTION_" in shown and "DORMANT_DEDUP_HORIZON_S" in shown and "``" not in shown
    assert "Default 200" in shown and "Default 512" in shown  # not eaten as markup
