"""Retention of long threads: the tiers, the bounded rounds that apply them
(:mod:`.policy`, described in ``docs/retention.md``) and the background pass the
runtime supervises (:mod:`.loop`).

May import: the store, the journal's rules and the root's vocabulary.
"""
