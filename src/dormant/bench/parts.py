"""Content parts at scale, small: agents that each send images, half of them one shared picture.

``python -m dormant.bench.parts [AGENTS]`` runs AGENTS threads (text-only model: the
bench measures storage and RAM, not a vision server) that each send 4 images of about
200 KB: 2 the same picture for every thread, 2 their own. It reports the store's size
against the unique bytes sent (each distinct image stored once), and the process's
RSS after the text-only run and after the run with images, both idle (after a
warm-up run of 5 threads with images, so that imports are not counted).
"""

from __future__ import annotations

import asyncio
import gc
import io
import os
import random
import sys
import tempfile
import time

import psutil

from ..agent import Agent
from ..config import Settings
from ..models.scripted import echo_model
from ..parts import Image
from ..runtime import Runtime

#: Images each thread sends, and how many of them are the picture every thread shares.
IMAGES, SHARED = 4, 2


def noise_png(seed: int, side: int = 256) -> bytes:
    """A PNG of random pixels (incompressible: about 200 KB at 256 x 256)."""
    from PIL import Image as PILImage

    data = random.Random(seed).randbytes(side * side * 3)
    out = io.BytesIO()
    PILImage.frombytes("RGB", (side, side), data).save(out, format="PNG")
    return out.getvalue()


async def run(path: str, agents: int, with_images: bool) -> tuple[int, int, float]:
    """(unique bytes sent, store bytes, seconds) of one run."""
    settings = Settings.build(store=f"sqlite:///{path}", poll_s=0.01, concurrency=32)
    shared = [noise_png(-1 - n) for n in range(SHARED)]
    unique = sum(len(b) for b in shared) if with_images else 0
    start = time.perf_counter()
    async with Runtime(settings.store, [Agent(name="a", model=echo_model())], settings=settings) as rt:
        for n in range(agents):
            parts = []
            if with_images:
                own = [noise_png(n * 10 + k) for k in range(IMAGES - SHARED)]
                unique += sum(len(b) for b in own)
                parts = [Image(b, name=f"img{k}.png") for k, b in enumerate(shared + own)]
            await rt.send(f"t{n}", "what do you see?", parts=parts)
        await rt.run_until_idle(timeout=600)
    size = os.path.getsize(path)
    return unique, size, time.perf_counter() - start


def rss() -> int:
    gc.collect()
    return int(psutil.Process().memory_info().rss)


async def main(agents: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        await run(f"{tmp}/warm.db", 5, True)  # Pillow, pypdf and the code paths loaded once
        base = rss()
        _, text_size, text_s = await run(f"{tmp}/text.db", agents, False)
        after_text = rss()
        unique, size, image_s = await run(f"{tmp}/images.db", agents, True)
        after_images = rss()
    print(f"agents {agents}, images per agent {IMAGES} ({SHARED} shared by all)")
    print(f"text-only: store {text_size / 1e6:.1f} MB, {text_s:.1f} s; RSS {after_text / 1e6:.1f} MB")
    print(
        f"images: unique bytes sent {unique / 1e6:.1f} MB, store {size / 1e6:.1f} MB "
        f"(store - text-only store) / unique = {(size - text_size) / unique:.3f}, {image_s:.1f} s"
    )
    print(
        f"RSS at start {base / 1e6:.1f} MB, idle after text-only {after_text / 1e6:.1f} MB, "
        f"idle after images {after_images / 1e6:.1f} MB"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 100))
