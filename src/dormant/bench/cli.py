"""``dormant bench`` commands."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks that print figures and write CSV/JSON/PNG.", no_args_is_help=True)
