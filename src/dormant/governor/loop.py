"""The RSS governor at work: samples RSS and acts on the levels of :mod:`dormant.governor.levels`.

RSS is sampled (psutil) every ``rss_sample_s`` by :meth:`Governor.run` and at
every slice boundary (:meth:`Governor.sample`). What each level does, through
narrow handles (:class:`Handles`) so the governor never reaches into the scheduler
or the store:

- **warn**: logged; the ``on_warn`` callbacks run (retention and checkpoints hook
  in there).
- **intervene**: no new thread is claimed (the scheduler's hold, renewed at every
  sample), the view cache shrinks to a quarter of its budget, the store's page
  caches are released (``Store.release_caches``), and
  concurrency is halved (halved again on entering emergency). Back at OK it climbs
  by an eighth of its configured value every ``recover_s``: restoring it at once
  would start as many slices as caused the pressure, and cancel them again.
- **emergency** and **hard**: running slices are cancelled (their inputs stay
  pending: the thread's lease is released and it is claimed again later, nothing
  is lost), admissions are refused with :class:`~dormant.errors.Overloaded` and a
  ``retry_after``, the view cache is emptied, then ``gc.collect()`` and glibc's
  ``malloc_trim(0)`` give freed memory back to the system. Over the hard limit the
  process stays read-only this way until RSS falls below it (less the hysteresis).

The governor cannot pre-empt code that allocates without yielding to the event
loop: a tool that allocates 1 GB in one call is over the limit before any sample
sees it. It bounds what is built up across awaits and across slices.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..config import Settings
from ..errors import LeaseLost, NotFound, Overloaded
from ..records import Claim
from ..slices.scheduler import Scheduler
from ..store.base import Store
from ..view.cache import ViewCache
from .levels import MIB, GovernorState, Level, Policy, Transition

log = logging.getLogger("dormant.governor")

#: cgroup v1 reports "no limit" as a huge number (a page-rounded 2**63-1).
_CGROUP_V1_UNLIMITED = 1 << 60


@functools.cache
def _process(pid: int) -> psutil.Process:
    return psutil.Process(pid)


@functools.cache
def _statm(pid: int) -> int | None:
    """A descriptor on ``/proc/<pid>/statm`` kept open (re-read at offset 0), or None
    where there is none (not Linux)."""
    try:
        return os.open(f"/proc/{pid}/statm", os.O_RDONLY)  # not inherited by children
    except OSError:
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_bytes() -> int:
    """This process's resident set size, in bytes: one ``pread`` of ``/proc/self/statm``
    on a kept descriptor (psutil opens, reads and closes the file per call, three times
    the cost), else psutil. Keyed by pid: right after a fork too."""
    pid = os.getpid()
    fd = _statm(pid)
    if fd is not None:
        with contextlib.suppress(OSError, IndexError, ValueError):
            return int(os.pread(fd, 128, 0).split()[1]) * _PAGE
    return int(_process(pid).memory_info().rss)


#: A slice boundary samples only if the last sample is older than this (seconds): a
#: sample costs ~40 us, and thousands of slices a second would pay it for nothing.
BOUNDARY_GAP_S = 0.005


def cgroup_limit(root: Path = Path("/sys/fs/cgroup"), proc: Path = Path("/proc/self/cgroup")) -> int | None:
    """The memory limit of this process's cgroup (v2 ``memory.max``, else v1), or None."""
    candidates: list[Path] = []
    with contextlib.suppress(OSError):
        for line in proc.read_text().splitlines():
            hierarchy, controllers, path = line.split(":", 2)
            if hierarchy == "0":  # v2: the unified hierarchy
                candidates.append(root / path.lstrip("/") / "memory.max")
            elif "memory" in controllers.split(","):
                candidates.append(root / "memory" / path.lstrip("/") / "memory.limit_in_bytes")
    candidates += [root / "memory.max", root / "memory" / "memory.limit_in_bytes"]
    for candidate in candidates:
        try:
            text = candidate.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        with contextlib.suppress(ValueError):
            value = int(text)
            return value if 0 < value < _CGROUP_V1_UNLIMITED else None
    return None


def detect_limit(configured: int = 0) -> tuple[int, str]:
    """The hard memory limit in bytes and where it came from: ``configured`` (if > 0,
    from ``DORMANT_RSS_LIMIT``), else the cgroup, else the machine's RAM."""
    if configured > 0:
        return configured, "DORMANT_RSS_LIMIT"
    cgroup = cgroup_limit()
    ram = int(psutil.virtual_memory().total)
    if cgroup is not None and cgroup < ram:
        return cgroup, "cgroup"
    return ram, "ram"


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, looked up once (``find_library`` may spawn processes)."""
    if os.name != "posix":
        return None
    for name in ("libc.so.6", ctypes.util.find_library("c")):
        if not name:
            continue
        try:
            trim = ctypes.CDLL(name).malloc_trim
        except (OSError, AttributeError):
            continue
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
        return trim
    return None


def malloc_trim() -> bool:
    """Ask glibc to return freed heap memory to the system; False where there is no glibc."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@dataclass(slots=True)
class Handles:
    """What the governor may do to the runtime; each handle is optional."""

    hold: Callable[[float], None] | None = None
    set_concurrency: Callable[[int], None] | None = None
    base_concurrency: int = 1
    cancel_slices: Callable[[], int] | None = None
    cache: ViewCache | None = None
    release_store_caches: Callable[[], object] | None = None
    on_warn: list[Callable[[Transition], None]] = field(default_factory=list)


class SliceShedder:
    """Cancels running slices and gives their leases back, so their inputs are claimed
    again ``retry_s`` later (nothing committed, nothing lost).

    ``running`` lists the running slices (claim, task); ``release`` gives a lease back
    with a retry time. A slice that committed before its cancellation landed is left
    alone (its release finds the lease gone). Holds at most one task per running slice.
    """

    def __init__(
        self,
        running: Callable[[], list[tuple[Claim, asyncio.Task[None]]]],
        release: Callable[[Claim, float], Awaitable[None]],
        *,
        retry_s: float,
        clock: Callable[[], float] = time.time,
        reclaim: Callable[[], object] | None = None,
    ) -> None:
        self.running = running
        self.reclaim = reclaim if reclaim is not None else reclaim_memory
        self.release = release
        self.retry_s = retry_s
        self.clock = clock
        self.cancelled = 0
        self._releasing: set[asyncio.Task[None]] = set()
        self._unwinding = 0  # shed slices not yet ended

    def __call__(self) -> int:
        """Cancel every running slice; return how many were cancelled."""
        count = 0
        for claim, task in self.running():
            if task.done() or task.cancelling():
                continue
            task.cancel()
            count += 1
            self._unwinding += 1
            releaser = asyncio.create_task(self._give_back(claim, task), name=f"shed:{claim.thread_id}")
            self._releasing.add(releaser)
            releaser.add_done_callback(self._releasing.discard)
        self.cancelled += count
        return count

    async def _give_back(self, claim: Claim, task: asyncio.Task[None]) -> None:
        await asyncio.wait([task])
        del task
        self._unwinding -= 1
        if not self._unwinding:
            # the last shed slice has unwound: what it held is garbage now, but a
            # cancelled frame sits in reference cycles (exception, traceback, frame) that
            # only a collection frees; the collection on entering emergency ran too early
            self.reclaim()
        try:
            await self.release(claim, self.clock() + self.retry_s)
        except (LeaseLost, NotFound):
            pass  # it committed (or was deleted) before the cancellation landed
        except Exception as exc:  # the lease expires by itself; the inputs stay pending
            log.error(
                "slice_shed_release_failed",
                extra={"thread_id": claim.thread_id, "error": f"{type(exc).__name__}: {exc}"},
            )


class Governor:
    """Samples RSS and applies the levels of a :class:`GovernorState` through ``handles``."""

    def __init__(
        self,
        policy: Policy,
        handles: Handles,
        *,
        sample_s: float = 0.1,
        retry_after_s: float = 5.0,
        recover_s: float = 1.0,
        rss: Callable[[], int] = rss_bytes,
        clock: Callable[[], float] = time.monotonic,
        source: str = "configured",
    ) -> None:
        self.state = GovernorState(policy)
        self.handles = handles
        self.sample_s = sample_s
        self.retry_after_s = retry_after_s
        self.recover_s = recover_s
        self.source = source
        self.concurrency = handles.base_concurrency  # what the scheduler is allowed now
        self._recovered_at = float("-inf")
        self._rss = rss
        self._clock = clock
        self._cache_budget = handles.cache.max_bytes if handles.cache is not None else 0
        self.admissions_refused = 0
        self._pending: set[asyncio.Future[object]] = set()  # at most one store release at a time
        self.samples = 0
        self.max_rss = 0
        self._sampled_at = float("-inf")

    @property
    def level(self) -> Level:
        """The current level."""
        return self.state.level

    def check_admission(self) -> None:
        """Raise :class:`Overloaded` (with ``retry_after``) while at emergency or over the hard limit."""
        if self.state.level >= Level.EMERGENCY:
            self.admissions_refused += 1
            s = self.state
            raise Overloaded(
                f"memory {s.level.name.lower()}: RSS {s.rss} of {s.soft_limit} bytes (hard limit "
                f"{s.hard_limit}); retry in {self.retry_after_s:g}s",
                retry_after=self.retry_after_s,
            )

    def sample_if_due(self) -> Level:
        """At a slice boundary: :meth:`sample` unless one ran in the last :data:`BOUNDARY_GAP_S`."""
        if time.monotonic() - self._sampled_at < BOUNDARY_GAP_S:
            return self.state.level
        return self.sample()

    def sample(self) -> Level:
        """Sample RSS now, act on any change of level, return the level."""
        self._sampled_at = time.monotonic()
        rss = self._rss()
        self.samples += 1
        self.max_rss = max(self.max_rss, rss)
        before = self.state.level
        for transition in self.state.observe(self._clock(), rss):
            self._log(transition)
        self._act(before, self.state.level)
        return self.state.level

    async def run(self, stop: asyncio.Event) -> None:
        """Sample every ``sample_s`` until ``stop`` is set."""
        while not stop.is_set():
            try:
                self.sample()
            except Exception as exc:  # a failed sample must not end the runtime
                log.error("memory_sample_failed", extra={"error": f"{type(exc).__name__}: {exc}"})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.sample_s)

    def _log(self, t: Transition) -> None:
        worse = t.after > t.before or t.event == "memory_soft_limit"
        log.log(
            logging.WARNING if worse else logging.INFO,
            t.event,
            extra={
                "before": t.before.name.lower(),
                "after": t.after.name.lower(),
                "rss_bytes": t.rss,
                "soft_limit_bytes": t.soft_limit,
                "hard_limit_bytes": t.hard_limit,
                "growth_bytes_per_min": round(t.growth_bytes_per_min),
            },
        )
        if t.event == "memory_level" and t.after == Level.WARN and t.before < Level.WARN:
            for callback in self.handles.on_warn:
                try:
                    callback(t)
                except Exception as exc:
                    log.error("memory_warn_hook_failed", extra={"error": f"{type(exc).__name__}: {exc}"})

    def _act(self, before: Level, level: Level) -> None:
        h = self.handles
        if level >= Level.INTERVENE and h.hold is not None:
            h.hold(max(2 * self.sample_s, 0.05))
        if level >= Level.EMERGENCY and h.cancel_slices is not None:
            h.cancel_slices()  # every sample: a claim in flight at entry may start a slice after
        if level == Level.OK and self.concurrency < h.base_concurrency:
            self._recover()
        if level == before:
            return
        if level >= Level.INTERVENE > before:
            self._resize_cache(self._cache_budget // 4)
            self._release_store_caches()
            self._set_concurrency(self.concurrency // 2)
        if level >= Level.EMERGENCY > before:
            self._set_concurrency(self.concurrency // 2)
            self._resize_cache(0)
            gc.collect()
            malloc_trim()
        elif before >= Level.EMERGENCY > level:
            self._resize_cache(self._cache_budget // 4)
        if level < Level.INTERVENE <= before:
            self._resize_cache(self._cache_budget)

    def _recover(self) -> None:
        """At OK, concurrency climbs back by an eighth of its configured value per
        ``recover_s`` (halved on entering intervene and again on entering emergency):
        restoring it at once would start as many slices as caused the pressure."""
        now = self._clock()
        if now - self._recovered_at >= self.recover_s:
            self._recovered_at = now
            base = self.handles.base_concurrency
            self._set_concurrency(min(base, self.concurrency + max(1, base // 8)))

    def _set_concurrency(self, n: int) -> None:
        self.concurrency = max(1, n)
        self._recovered_at = self._clock()  # the next climb waits a full recover_s
        if self.handles.set_concurrency is not None:
            self.handles.set_concurrency(self.concurrency)

    def _resize_cache(self, budget: int) -> None:
        if self.handles.cache is not None:
            self.handles.cache.resize(budget)

    def _release_store_caches(self) -> None:
        release = self.handles.release_store_caches
        if release is None:
            return
        try:
            result = release()
            if inspect.isawaitable(result) and not self._pending:
                task = asyncio.ensure_future(result)
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
                task.add_done_callback(_log_release_failure)
        except Exception as exc:
            log.error("store_release_memory_failed", extra={"error": f"{type(exc).__name__}: {exc}"})


def reclaim_memory() -> None:
    """Collect cyclic garbage and give freed heap back to the system (``malloc_trim``)."""
    gc.collect()
    malloc_trim()


def _log_release_failure(task: asyncio.Future[object]) -> None:
    if not task.cancelled() and task.exception() is not None:
        exc = task.exception()
        log.error("store_release_memory_failed", extra={"error": f"{type(exc).__name__}: {exc}"})


def build_governor(
    settings: Settings, scheduler: Scheduler, store: Store, clock: Callable[[], float] = time.time
) -> Governor | None:
    """The governor of a runtime from ``settings`` (None when ``rss_governor`` is off),
    wired to ``scheduler`` (hold, concurrency, cancel) and ``store`` (its view cache
    ``views``, :meth:`~dormant.store.base.Store.release_caches`, lease release, with
    retry times read from ``clock``, the runtime's)."""
    if not settings.rss_governor:
        return None
    limit, source = detect_limit(settings.rss_limit)
    policy = Policy(
        hard_limit=limit,
        warn=settings.rss_warn,
        intervene=settings.rss_intervene,
        emergency=settings.rss_emergency,
        hysteresis=settings.rss_hysteresis,
        soft_step=settings.rss_soft_step,
        soft_min=settings.rss_soft_min,
        growth_bytes_per_min=settings.rss_growth_mb_per_min * MIB,
        growth_window_s=settings.rss_growth_window_s,
    )

    async def release(claim: Claim, retry_at: float) -> None:
        await store.release(claim, retry_at=retry_at)

    def set_concurrency(n: int) -> None:
        scheduler.concurrency = n

    handles = Handles(
        hold=scheduler.hold,
        set_concurrency=set_concurrency,
        base_concurrency=scheduler.concurrency,
        cancel_slices=SliceShedder(
            scheduler.slices, release, retry_s=settings.rss_retry_after_s, clock=clock
        ),
        cache=store.views,
        release_store_caches=store.release_caches,
    )
    return Governor(
        policy,
        handles,
        sample_s=settings.rss_sample_s,
        retry_after_s=settings.rss_retry_after_s,
        recover_s=settings.rss_recover_s,
        source=source,
    )
