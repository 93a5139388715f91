"""MiniLM's RAM after a batch of long texts: the session keeps no arena sized by the
largest batch it ever ran (a subprocess, so that nothing else in the process counts)."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import psutil
from dormant.memory.embedder import MiniLMEmbedder
e = MiniLMEmbedder()
e.embed(["warm the model up"])
before = psutil.Process().memory_info().rss
e.embed([("word%d " % i) * 300 for i in range(32)])  # one batch of 32 texts of 256 tokens
print(psutil.Process().memory_info().rss - before)
"""


def test_a_batch_of_long_texts_leaves_no_arena_behind() -> None:
    grown = int(
        subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True).stdout
    )
    assert grown < 150 * 2**20, f"RSS grew {grown / 2**20:.0f} MiB after one batch"


def test_batches_are_bounded_by_texts_and_by_length_squared() -> None:
    from dormant.memory.embedder import ATTENTION_BUDGET, token_batches

    lengths = [10] * 40 + [256] * 5
    batches = token_batches(range(45), lengths, 32)
    assert [len(b) for b in batches] == [32, 8, 2, 2, 1]
    assert sorted(i for b in batches for i in b) == list(range(45))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) ** 2 <= ATTENTION_BUDGET
