"""Execution slices: claim a thread, load its view, call the model, commit, forget.

Owns the pure step (:mod:`.step`: ``Turn`` -> ``CommitPlan``), one slice's I/O and
failure policy (:mod:`.runner`), claims and leases (:mod:`.scheduler`), async tool
calls from the outbox (:mod:`.dispatcher`), retry timing (:mod:`.retry`),
compaction (:mod:`.compaction`: when and where a thread is summarized) and
long-term memory in the slice loop (:mod:`.memory`: recall, registers and memory
writes in the slice's commit).

May import: the store, the view, tools, long-term memory, models, ``agent`` and the
root's vocabulary. Never the governor, retention, the runtime, the server or the CLI:
they drive slices through narrow handles.
"""
