"""The state journal's rules: change validation, replay, checkpoint bodies, when a
checkpoint is due, and the estimated recovery time (:mod:`.rules`).

Pure logic: the rows live in the store (:mod:`dormant.store.journal` drives them).
May import: the package root's vocabulary only.
"""
