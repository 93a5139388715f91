"""The public names of ``dormant.memory`` are pinned: adding or removing one is a decision."""

from __future__ import annotations

import dormant.memory


def test_public_names() -> None:
    assert sorted(dormant.memory.__all__) == sorted([
        "DEFAULT_TENANT", "HYBRID", "AddResult", "Dictionary", "Embedder", "FilterSpec", "HashingEmbedder",
        "Memory", "MemoryBackend", "MemoryChange", "MemoryConfig", "MemoryCore", "MemoryKind", "MemoryPage",
        "MemoryRecord", "MiniLMEmbedder", "MultilingualEmbedder", "NewMemory", "RankingPolicy", "Recall",
        "RecallHit", "RecallMode", "SupersessionRules", "bind",
    ])  # fmt: skip
    for name in dormant.memory.__all__:
        assert getattr(dormant.memory, name) is not None
