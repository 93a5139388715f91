"""The PostgreSQL backend (see :mod:`.store`): statements in :mod:`.sql`, the schema in
``schema.sql`` with numbered ``migrations/``, the group-committing :mod:`.writer`."""

from __future__ import annotations

from .schema import SCHEMA_VERSION
from .store import PostgresStore

__all__ = ["SCHEMA_VERSION", "PostgresStore"]
