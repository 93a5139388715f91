"""The MiniLM embedder's RSS after 40 batches of mixed shapes, with onnxruntime's
memory patterns as the embedder sets them (``current``) or turned back on (``patterns``).

    python docs/bench/embedder-shapes/study.py current
    python docs/bench/embedder-shapes/study.py patterns
"""

import ctypes
import random
import sys
import time

import onnxruntime as ort

from dormant.governor.loop import rss_bytes
from dormant.memory.embedder import MiniLMEmbedder

variant = sys.argv[1] if len(sys.argv) > 1 else "current"
_session = ort.InferenceSession


def _patched(data, sess_options=None, providers=None):  # type: ignore[no-untyped-def]
    if variant == "patterns":
        sess_options.enable_mem_pattern = True
    return _session(data, sess_options=sess_options, providers=providers)


ort.InferenceSession = _patched  # type: ignore[misc]
trim = ctypes.CDLL("libc.so.6").malloc_trim
trim(0)
start = rss_bytes()
embedder = MiniLMEmbedder()
embedder.embed(["warm the model up"])
trim(0)
loaded = rss_bytes() - start
random.seed(1)
vocab = "alpha beta gamma delta river stone cloud music paper window".split()
cpu = time.process_time()
for _ in range(40):
    count = random.choice([1, 5, 32, 64])
    words = random.choice([3, 10, 30, 60, 120, 250])
    embedder.embed([" ".join(random.choice(vocab) for _ in range(words)) for _ in range(count)])
trim(0)
print(
    f"{variant}: load +{loaded / 2**20:.1f} MiB, after 40 batches +{(rss_bytes() - start) / 2**20:.1f} MiB, "
    f"CPU {time.process_time() - cpu:.2f} s"
)
