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
