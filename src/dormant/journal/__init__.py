"""The state journal's rules: change validation, replay, checkpoint bodies, when a
checkpoint is due, and the estimated recovery time (:mod:`.rules`); the runtime's handle on
a thread's state (``rt.state``, ``checkpoint``, ``fork``, ``rewind``: :mod:`.handles`, a mixin).

Pure logic (the mixin only calls the store it is given): the rows live in the store
(:mod:`dormant.store.journal` drives them).
May import: the package root's vocabulary only.
"""
