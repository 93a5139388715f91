"""The images benchmark's arithmetic: which image is the shared picture, the counts and
unique bytes, the store ratio, the RSS slope, the probe threads, the extra cost; and
the pictures and the loopback server's counting."""

from __future__ import annotations

import io
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dormant.bench.images import (
    IMAGES_PER_AGENT,
    SHARED_SEED,
    agent_images,
    compare,
    extra_cost,
    image_counts,
    is_shared,
    noise_png,
    probe_threads,
    store_ratio,
    unique_bytes,
    wave_slope,
)
from dormant.bench.scale import slope_kib_per_agent
from dormant.bench.upload import growth
from dormant.bench.vision_server import count_images


def test_half_of_all_images_are_the_shared_picture() -> None:
    # image g = 5 * agent + k: even g is the shared one
    assert [is_shared(0, k) for k in range(5)] == [True, False, True, False, True]
    assert [is_shared(1, k) for k in range(5)] == [False, True, False, True, False]
    assert image_counts(10_000) == (50_000, 25_000, 25_001)
    assert image_counts(3) == (15, 8, 8)  # odd total: one more copy of the shared picture


@given(st.integers(min_value=1, max_value=400))
def test_counts_match_the_rule(agents: int) -> None:
    flags = [is_shared(a, k) for a in range(agents) for k in range(IMAGES_PER_AGENT)]
    total, copies, distinct = image_counts(agents)
    assert total == len(flags) and copies == sum(flags)
    assert distinct == flags.count(False) + 1
    assert abs(copies - (total - copies)) <= 1


def test_unique_bytes_and_store_ratio() -> None:
    assert unique_bytes(100, [10, 20]) == 130
    assert store_ratio(143, 130) == pytest.approx(1.1)
    assert store_ratio(150, 130, baseline_bytes=20) == pytest.approx(1.0)
    assert store_ratio(10, 0) == 0.0


def test_wave_slope_skips_the_first_wave_and_matches_agent_scale() -> None:
    points = [(1000, 90_000_000), (2000, 80_000_000), (3000, 80_000_000 + 1024 * 1000)]
    assert wave_slope(points) == pytest.approx(1.0)  # wave 1 skipped: 1024 bytes per agent
    assert wave_slope(points) == pytest.approx(slope_kib_per_agent(points))
    assert wave_slope([(1, 0), (2, 2048)]) == pytest.approx(2.0)  # two waves: both used
    flat = [(n * 1000, 75_000_000) for n in range(1, 11)]
    assert wave_slope(flat) == 0.0


def test_probe_threads_spread_over_the_run() -> None:
    assert probe_threads(10_000, 4) == [0, 2500, 5000, 7500]
    assert probe_threads(3, 10) == [0, 1, 2]
    assert len(set(probe_threads(10_000, 200))) == 200


def test_extra_cost_is_images_minus_text() -> None:
    assert extra_cost({"p50": 12.0, "cpu": 3.0, "only": 1.0}, {"p50": 10.0, "cpu": 0.0}) == {
        "p50": 2.0,
        "p50_ratio": 1.2,
        "cpu": 3.0,
        "cpu_ratio": 0.0,
    }


def test_compare_reports_the_targets_figures() -> None:
    keys = (
        "slice_p50_ms",
        "slice_p95_ms",
        "cpu_ms_per_slice",
        "probe_p50_ms",
        "probe_p95_ms",
        "probe_cpu_ms",
    )
    text: dict[str, Any] = {k: 1.0 for k in keys} | {"store_bytes": 1_000, "rss_slope_kib_per_agent": 0.01}
    text |= {"rss_end_bytes": 70, "rss_peak_bytes": 80}
    images: dict[str, Any] = {k: 3.0 for k in keys} | {
        "store_bytes": 111_000,
        "rss_slope_kib_per_agent": 0.02,
    }
    images |= {"rss_end_bytes": 71, "rss_peak_bytes": 90, "unique_bytes": 100_000, "agents": 2}
    images |= {"images_sent": 10, "shared_copies": 5, "distinct_pictures": 6, "probe_cpu_p95_ms": 4.0}
    images["text_probe"] = {"p50_ms": 2.0, "p95_ms": 2.0, "cpu_ms": 1.5, "cpu_p95_ms": 2.0}
    summary = compare(text, images, 0.03)
    assert summary["store_over_unique"] == 1.11
    assert summary["store_minus_text_over_unique"] == 1.1
    assert summary["rss_slope_kib_per_agent"] == {"images": 0.02, "text": 0.01, "agent_scale": 0.03}
    assert summary["extra_per_slice"]["probe_cpu_ms"] == 2.0
    assert summary["extra_per_slice"]["slice_p95_ms_ratio"] == 3.0
    paired = summary["extra_per_probe_slice_paired"]
    assert paired["p50_ms"] == 1.0 and paired["cpu_ms"] == 1.5 and paired["cpu_p95_ms_ratio"] == 2.0


def test_the_pictures_are_valid_distinct_png_of_about_200_kb() -> None:
    from PIL import Image

    data = noise_png(7)
    with Image.open(io.BytesIO(data)) as img:
        img.load()
        assert img.size == (256, 256) and img.format == "PNG"
    assert 190_000 < len(data) < 210_000
    assert noise_png(7) == data and noise_png(8) != data
    shared = noise_png(SHARED_SEED)
    images, own = agent_images(1, shared)
    assert [b is shared for b in images] == [False, True, False, True, False]
    assert own == [len(images[0]), len(images[2]), len(images[4])]
    assert len({*images}) == 4
    # no picture of its own is the shared one (seeds are image numbers; the shared seed is none)
    first, _ = agent_images(0, shared)
    assert shared not in (first[1], first[3])


def test_the_loopback_server_counts_data_uri_images_in_the_adapters_body() -> None:
    body = msgspec.json.encode(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "data:image/png not a part"},
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,AAAA", "detail": "auto"},
                        },
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                        {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}},
                    ],
                }
            ]
        }
    )
    assert count_images(body) == 2


def test_upload_growth() -> None:
    assert growth(100, 150) == 50
    assert growth(100, 90) == 0
