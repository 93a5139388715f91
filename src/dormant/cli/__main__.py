"""``python -m dormant.cli``: the ``dormant`` command."""

from .main import main

main()
