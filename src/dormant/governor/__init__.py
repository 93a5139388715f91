"""The RSS governor: keeps the process under its RAM limit by refusing work.

Owns the pure level machine (:mod:`.levels`: RSS samples in, a level out), the loop
that samples RSS and acts through narrow handles (:mod:`.loop`: scheduler hold,
concurrency, cache shrink, admission gate, cancelling slices) and the garbage
collector's tuning while a runtime runs (:mod:`.gctune`).

"RSS" here is process RAM; long-term memory is :mod:`dormant.memory`. May import:
the slices' scheduler, the view cache, the store protocol and the root's vocabulary.
"""
