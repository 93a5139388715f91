"""Long-term memory: records bound to identities, hybrid recall, a business dictionary.

The public names are listed in ``__all__`` (a test pins them). See
``docs/memory.md`` for the model and BENCHMARKS.md for the recall figures.

May import: tools (for the memory tools), tenants and the root's vocabulary. Its rows
are the store's (``store/*/memory/``); only :mod:`.facade` (``Memory.open`` opens a store
by URL) sits above the store.
"""

from .backend import AddResult, MemoryBackend
from .binding import bind
from .core import HYBRID, MemoryConfig, MemoryCore, RecallMode
from .dictionary import Dictionary
from .embedder import Embedder, HashingEmbedder, MiniLMEmbedder, MultilingualEmbedder
from .facade import Memory
from .ranking import FilterSpec, RankingPolicy, SupersessionRules
from .records import (
    DEFAULT_TENANT,
    MemoryChange,
    MemoryKind,
    MemoryPage,
    MemoryRecord,
    NewMemory,
    Recall,
    RecallHit,
)

__all__ = [
    "DEFAULT_TENANT",
    "HYBRID",
    "AddResult",
    "Dictionary",
    "Embedder",
    "FilterSpec",
    "HashingEmbedder",
    "Memory",
    "MemoryBackend",
    "MemoryChange",
    "MemoryConfig",
    "MemoryCore",
    "MemoryKind",
    "MemoryPage",
    "MemoryRecord",
    "MiniLMEmbedder",
    "MultilingualEmbedder",
    "NewMemory",
    "RankingPolicy",
    "Recall",
    "RecallHit",
    "RecallMode",
    "SupersessionRules",
    "bind",
]
