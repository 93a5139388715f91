"""Long-term memory's rows on PostgreSQL: records, their history, full-text and
pgvector indexes, in the store's schema, through the store's pool and writer.

:mod:`.rows` is the :class:`~dormant.memory.backend.MemoryBackend`, :mod:`.reads`
its reads, :mod:`.sql` every statement.
"""
