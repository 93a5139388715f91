"""Garbage-collector tuning while a runtime runs.

CPython's youngest-generation threshold (700 by default) is raised while a runtime
runs: hundreds of slices in flight keep thousands of young container objects
(coroutines, futures, views) alive, so at the default each allocation burst
re-traverses that working set, and every tenth young collection cascades into a
full one over the whole heap: measured 15-18 % of the CPU of an agent_scale turn.
Almost nothing a slice allocates is cyclic garbage (refcounting frees it), so
collecting less often costs no memory to speak of.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

#: CPython's youngest-generation GC threshold while a runtime runs (the default is 700).
GC_THRESHOLD = 50_000
_gc_users = 0  # runtimes running in this process; the first one tunes, the last one restores
_gc_saved: tuple[int, int, int] | None = None


@contextlib.contextmanager
def gc_tuned() -> Iterator[None]:
    """Raise the young-generation GC threshold to :data:`GC_THRESHOLD` while inside.

    Nested or concurrent uses share one setting; the last to leave restores what was
    set before the first entered. A threshold already above it is left alone.
    """
    global _gc_users, _gc_saved
    if _gc_users == 0:
        _gc_saved = gc.get_threshold()
        first, second, third = _gc_saved
        if 0 < first < GC_THRESHOLD:  # 0: collection is disabled, leave it so
            gc.set_threshold(GC_THRESHOLD, second, third)
    _gc_users += 1
    try:
        yield
    finally:
        _gc_users -= 1
        if _gc_users == 0 and _gc_saved is not None:
            gc.set_threshold(*_gc_saved)
            _gc_saved = None
