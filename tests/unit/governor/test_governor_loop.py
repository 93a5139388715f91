"""The governor's driver: what each level does through its handles; limit detection."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from dormant.errors import LeaseLost, Overloaded
from dormant.governor.levels import MIB, Level, Policy, Transition
from dormant.governor.loop import Governor, Handles, SliceShedder, cgroup_limit, detect_limit, rss_bytes
from dormant.records import Claim
from dormant.view.cache import ViewCache
from tests.helpers import eventually


class Fakes:
    def __init__(self) -> None:
        self.rss = 0
        self.holds: list[float] = []
        self.concurrency: list[int] = []
        self.cancels = 0
        self.releases = 0
        self.warned: list[Transition] = []
        self.cache = ViewCache(64 * MIB)

    def handles(self) -> Handles:
        def cancel() -> int:
            self.cancels += 1
            return 0

        def release() -> None:
            self.releases += 1

        return Handles(
            hold=self.holds.append,
            set_concurrency=self.concurrency.append,
            base_concurrency=8,
            cancel_slices=cancel,
            cache=self.cache,
            release_store_caches=release,
            on_warn=[self.warned.append],
        )


def governor(fakes: Fakes) -> Governor:
    clock = iter(range(1_000_000))
    return Governor(
        Policy(hard_limit=1000 * MIB),
        fakes.handles(),
        sample_s=0.01,
        retry_after_s=2.5,
        rss=lambda: fakes.rss,
        clock=lambda: float(next(clock)),
    )


def test_each_level_acts_through_its_handles(caplog: pytest.LogCaptureFixture) -> None:
    f = Fakes()
    g = governor(f)
    caplog.set_level(logging.INFO, logger="dormant.governor")
    f.rss = 100 * MIB
    assert g.sample() is Level.OK
    assert (f.holds, f.cancels, f.releases) == ([], 0, 0)
    g.check_admission()

    f.rss = 650 * MIB
    assert g.sample() is Level.WARN
    assert [t.after for t in f.warned] == [Level.WARN]
    assert f.holds == []

    f.rss = 800 * MIB
    assert g.sample() is Level.INTERVENE
    assert f.holds and f.releases == 1 and f.concurrency == [4]
    assert f.cache.max_bytes == 16 * MIB
    assert f.cancels == 0
    g.check_admission()  # intervening still admits

    f.rss = 950 * MIB
    assert g.sample() is Level.EMERGENCY
    assert f.cancels == 1 and f.cache.max_bytes == 0
    with pytest.raises(Overloaded) as refused:
        g.check_admission()
    assert refused.value.retry_after == 2.5
    assert g.admissions_refused == 1
    g.sample()  # still in emergency: slices started meanwhile are cancelled too
    assert f.cancels == 2

    assert f.concurrency == [4, 2]  # halved on intervene, again on emergency

    f.rss = 300 * MIB
    assert g.sample() is Level.OK
    assert f.cache.max_bytes == 64 * MIB
    for _ in range(10):  # back at OK, concurrency climbs by base/8 per recover_s (1 s here)
        g.sample()
    assert f.concurrency == [4, 2, 3, 4, 5, 6, 7, 8]
    g.check_admission()
    events = [(r.getMessage(), getattr(r, "after", None)) for r in caplog.records]
    assert events == [
        ("memory_level", "warn"),
        ("memory_level", "intervene"),
        ("memory_level", "emergency"),
        ("memory_level", "ok"),
    ]
    assert g.state.transitions[Level.EMERGENCY] == 1
    assert g.max_rss == 950 * MIB


def test_concurrency_stays_halved_until_memory_is_back_to_ok() -> None:
    f = Fakes()
    g = governor(f)
    f.rss = 800 * MIB
    g.sample()
    f.rss = 640 * MIB  # below intervene's band: warn
    for _ in range(3):
        assert g.sample() is Level.WARN
    assert f.concurrency == [4]
    assert f.cache.max_bytes == 64 * MIB
    f.rss = 100 * MIB
    g.sample()
    g.sample()
    assert f.concurrency == [4, 5, 6]


def test_over_the_hard_limit_admissions_are_refused_until_memory_falls() -> None:
    f = Fakes()
    g = governor(f)
    f.rss = 1100 * MIB
    assert g.sample() is Level.HARD
    with pytest.raises(Overloaded):
        g.check_admission()
    f.rss = 990 * MIB
    g.sample()
    with pytest.raises(Overloaded):
        g.check_admission()
    f.rss = 200 * MIB
    g.sample()
    g.check_admission()


async def test_the_sampler_runs_until_stopped() -> None:
    f = Fakes()
    g = governor(f)
    f.rss = 950 * MIB
    stop = asyncio.Event()
    task = asyncio.create_task(g.run(stop))

    # an emergency sample collects garbage, which takes a while in a big test process:
    # wait for three samples (bounded) rather than a fixed time
    async def three() -> bool:
        return g.samples >= 3

    await eventually(three)
    stop.set()
    await asyncio.wait_for(task, 5)
    assert g.samples >= 3
    assert g.level is Level.EMERGENCY


def claim(thread: str) -> Claim:
    return Claim(thread_id=thread, agent="a", token=f"tok-{thread}", expires_at=0.0)


async def test_shed_slices_are_cancelled_and_their_leases_given_back() -> None:
    started = asyncio.Event()

    async def slice_body() -> None:
        started.set()
        await asyncio.sleep(60)

    running = [
        (claim("t1"), asyncio.create_task(slice_body())),
        (claim("t2"), asyncio.create_task(slice_body())),
    ]
    released: list[tuple[str, float]] = []

    async def release(c: Claim, retry_at: float) -> None:
        if c.thread_id == "t2":
            raise LeaseLost("committed first")
        released.append((c.thread_id, retry_at))

    reclaims: list[int] = []
    shed = SliceShedder(
        lambda: running,
        release,
        retry_s=3.0,
        clock=lambda: 100.0,
        reclaim=lambda: reclaims.append(len(running)),
    )
    await started.wait()
    assert shed() == 2
    assert shed() == 0  # already cancelling
    await asyncio.sleep(0.05)
    assert all(task.cancelled() for _, task in running)
    assert released == [("t1", 103.0)]
    assert shed.cancelled == 2
    # once the last shed slice unwound, its cyclic garbage (frames held by the
    # cancellation's traceback) was collected: once, not per slice
    assert reclaims == [2]


def test_cgroup_v2_and_v1_limits_are_read(tmp_path: Path) -> None:
    proc = tmp_path / "cgroup"
    proc.write_text("0::/app\n")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "memory.max").write_text("536870912\n")
    assert cgroup_limit(tmp_path, proc) == 512 * MIB
    (tmp_path / "app" / "memory.max").write_text("max\n")
    assert cgroup_limit(tmp_path, proc) is None
    proc.write_text("4:memory:/box\n")
    (tmp_path / "memory" / "box").mkdir(parents=True)
    (tmp_path / "memory" / "box" / "memory.limit_in_bytes").write_text("268435456\n")
    assert cgroup_limit(tmp_path, proc) == 256 * MIB
    (tmp_path / "memory" / "box" / "memory.limit_in_bytes").write_text(str(2**63 - 4096))
    assert cgroup_limit(tmp_path, proc) is None


def test_a_configured_limit_wins() -> None:
    assert detect_limit(123 * MIB) == (123 * MIB, "DORMANT_RSS_LIMIT")
    limit, source = detect_limit(0)
    assert limit > 0 and source in ("cgroup", "ram")


def test_slice_boundaries_sample_at_most_once_per_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    # a gap no loaded host outlasts within the loop (5 ms did, descheduled mid-loop)
    monkeypatch.setattr("dormant.governor.loop.BOUNDARY_GAP_S", 60.0)
    f = Fakes()
    g = governor(f)
    f.rss = 100 * MIB
    for _ in range(1000):
        g.sample_if_due()
    assert g.samples == 1  # a thousand boundaries within the gap: one sample
    f.rss = 950 * MIB
    g.sample()  # the timer always samples
    assert g.samples == 2 and g.level is Level.EMERGENCY


def test_memory_settings_take_sizes_and_refuse_unordered_levels() -> None:
    from dormant.config import Settings
    from dormant.errors import UsageError

    assert Settings.build(rss_limit="512M").rss_limit == 512 * MIB
    assert Settings.build(rss_limit="1.5GiB").rss_limit == 1536 * MIB
    assert Settings.build(rss_limit=1234).rss_limit == 1234
    for bad in ({"rss_limit": "lots"}, {"rss_warn": 0.8}, {"rss_hysteresis": 0.7}):
        with pytest.raises(UsageError):
            Settings.build(**bad)


async def test_a_runtime_builds_its_governor_from_settings() -> None:
    from dormant import Agent, Runtime
    from dormant.config import Settings
    from dormant.models import echo_model

    agents = [Agent(name="a", model=echo_model())]
    on = Settings.build(rss_limit="2G", rss_emergency=0.8, concurrency=16)
    rt = Runtime("memory://", agents, settings=on)
    assert rt.governor is not None
    assert rt.governor.state.hard_limit == 2048 * MIB
    assert rt.governor.state.threshold(Level.EMERGENCY) == int(2048 * MIB * 0.8)
    assert rt.governor.handles.base_concurrency == 16
    assert rt.governor.source == "DORMANT_RSS_LIMIT"
    # wired to the store's own abilities, not probed for them
    assert rt.governor.handles.cache is rt.store.views
    assert rt.governor.handles.release_store_caches == rt.store.release_caches
    off = Runtime("memory://", agents, settings=Settings.build(rss_governor=False))
    assert off.governor is None


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc (Linux)")
def test_rss_bytes_reads_this_process_also_after_a_fork() -> None:
    """The kept ``/proc/<pid>/statm`` descriptor is per process: a forked child that
    grows by 64 MiB reads its own size, not its parent's through the inherited one."""
    import psutil

    assert abs(rss_bytes() - psutil.Process().memory_info().rss) < 8 << 20
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            before = rss_bytes()
            grown = b"x" * (64 << 20)  # written: resident
            assert grown
            os.write(write, str(rss_bytes() - before).encode())
        finally:
            os._exit(0)
    os.close(write)
    grew = int(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    assert grew > 56 << 20
