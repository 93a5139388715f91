"""Benchmarks shipped with the package (``dormant bench ...``); not part of ``make test``.

The top of the house with the CLI: may import every other package."""
