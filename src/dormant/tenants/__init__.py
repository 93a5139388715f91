"""Tenants: their ids and names, salted-hash API keys (:mod:`.keys`), and the tenant
scope of thread ids (:mod:`.scope`) that the store core enforces on every thread,
input and blob operation.

Pure rules, no I/O: the rows live in the store. May import: the package root's
vocabulary only.
"""
