"""The view: the bounded slice of a thread's history that one model call sees.

Owns the prompt budget (:mod:`.budget`), the view builder (:mod:`.builder`: the
summary and the newest messages under the budget, the pairing rule, head + tail
clips), the view cache in RAM (:mod:`.cache`) and its spill file (:mod:`.spill`),
the page manager (:mod:`.pages`) and the state/memories sections of a prompt
(:mod:`.sections`).

May import: the package root's vocabulary (``errors``, ``records``, ``tokens``),
:mod:`dormant.models` (what a model's window is) and :mod:`dormant.memory`'s
facts. Never the store, the slices or the runtime: they use a view, a view does
not know them.
"""
