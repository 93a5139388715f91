"""Benchmarks shipped with the package (``dormant bench ...``); not part of ``make test``."""
