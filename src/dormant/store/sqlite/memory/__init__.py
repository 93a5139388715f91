"""Long-term memory's rows on SQLite: records, their history, FTS5 and sqlite-vec
indexes, in the store's own file and transactions.

:mod:`.rows` is the :class:`~dormant.memory.backend.MemoryBackend` (writes go through
the store's group-committing writer, :mod:`.write`; reads through a small pool of
read-only connections, :mod:`.readers`); :mod:`.search` ranks, :mod:`.link` links
binding keys, :mod:`.sql` holds every statement.
"""
