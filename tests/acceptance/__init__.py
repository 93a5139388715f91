"""Acceptance tests: the CLI in a subprocess."""
