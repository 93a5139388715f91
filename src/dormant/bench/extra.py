"""Whether the ``bench`` extra is installed (``pip install 'dormant[bench]'``).

A plain ``pip install dormant`` installs no plotting library: the benchmarks, which
draw their charts with matplotlib, need the extra. This module only looks the package
up (``importlib.util.find_spec``): nothing is imported until a benchmark runs.
"""

from __future__ import annotations

import importlib.util

#: the packages the ``bench`` extra adds, by import name
BENCH_PACKAGES = ("matplotlib",)
INSTALL_HINT = "pip install 'dormant[bench]'"


def missing_bench_packages() -> list[str]:
    """The import names of the ``bench`` extra's packages this environment lacks."""
    missing = []
    for name in BENCH_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a broken or blocked package counts as missing
            found = False
        if not found:
            missing.append(name)
    return missing


def bench_extra_message(command: str) -> str | None:
    """What to install before ``command`` can run, or ``None`` when the extra is installed."""
    missing = missing_bench_packages()
    if not missing:
        return None
    return (
        f"`{command}` needs the bench extra ({', '.join(missing)} not installed; a plain "
        f"`pip install dormant` leaves it out): run {INSTALL_HINT}"
    )
