"""The ``dormant`` command line: one module per command group (:mod:`.main` wires
them), agent loading for ``--app`` (:mod:`.apps`) and the demo (:mod:`.demo`).

The top of the house: may import every other package. ``python -m dormant.cli`` runs
:func:`dormant.cli.main.main`.
"""
