"""The RSS governor's state machine: pure, no I/O, unit-tested on its own.

It is fed RSS samples ``(now, rss)`` and answers with the level the process is at,
and a :class:`Transition` whenever that level changes. What a level *does* (hold
claims, shrink the view cache, cancel slices, refuse admissions) is up to the
driver, :class:`dormant.governor.loop.Governor`.

Limits:

- the **hard** limit is the memory the process may use (``DORMANT_RSS_LIMIT``,
  else the cgroup's ``memory.max``, else the machine's RAM). At or over it the
  process is :attr:`Level.HARD`: read-only until memory falls.
- the **soft** limit is a share of the hard one (1.0 at start). The levels are
  shares of the soft limit: warn (0.60), intervene (0.75), emergency (0.90).
  It adapts: when RSS grew faster than ``growth_bytes_per_min`` over the last
  ``growth_window_s`` (a leak, a run-away tool), the soft share drops by
  ``soft_step`` (down to ``soft_min``), so interventions start earlier; when
  growth is stable again it climbs back by the same step. At most one change
  per ``soft_adjust_s``.

Hysteresis: a level is entered as soon as its threshold is reached, but left only
once RSS is ``hysteresis`` (a share of the soft limit) below it, so a process
hovering at a threshold does not flap.

Memory: the growth history keeps at most :data:`MAX_HISTORY` samples (older ones
are thinned to one per ``growth_window_s / MAX_HISTORY``), whatever the rate.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from enum import IntEnum

#: Samples kept for the growth rate, at most.
MAX_HISTORY = 256
MIB = 1024 * 1024


class Level(IntEnum):
    """How close the process is to its memory limit (higher is worse)."""

    OK = 0
    WARN = 1
    INTERVENE = 2
    EMERGENCY = 3
    HARD = 4


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """The governor's thresholds. Shares are fractions (0.6 = 60 %)."""

    hard_limit: int
    warn: float = 0.60
    intervene: float = 0.75
    emergency: float = 0.90
    hysteresis: float = 0.05
    soft_step: float = 0.10
    soft_min: float = 0.50
    growth_bytes_per_min: float = 50 * MIB
    growth_window_s: float = 600.0
    soft_adjust_s: float = 120.0

    def __post_init__(self) -> None:
        if self.hard_limit <= 0:
            raise ValueError("hard_limit must be positive")
        if not 0 < self.warn < self.intervene < self.emergency <= 1:
            raise ValueError("need 0 < warn < intervene < emergency <= 1")
        if not 0 <= self.hysteresis < self.warn:
            raise ValueError("need 0 <= hysteresis < warn")
        if not 0 < self.soft_min <= 1 or self.soft_step < 0:
            raise ValueError("need 0 < soft_min <= 1 and soft_step >= 0")
        if self.growth_window_s <= 0 or self.soft_adjust_s < 0:
            raise ValueError("growth_window_s must be positive and soft_adjust_s not negative")


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A change of level, or of the soft limit, with what caused it."""

    event: str  # stable name: "memory_level" or "memory_soft_limit"
    before: Level
    after: Level
    rss: int
    soft_limit: int
    hard_limit: int
    growth_bytes_per_min: float


class GovernorState:
    """Levels, the adaptive soft limit and the growth history. Feed it :meth:`observe`."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.level = Level.OK
        self.soft_share = 1.0
        self.rss = 0
        self.transitions: dict[Level, int] = dict.fromkeys(Level, 0)
        self.soft_changes = 0
        self._history: deque[tuple[float, int]] = deque(maxlen=MAX_HISTORY)
        self._last_adjust = float("-inf")

    @property
    def hard_limit(self) -> int:
        """Bytes at or over which the process is read-only."""
        return self.policy.hard_limit

    @property
    def soft_limit(self) -> int:
        """Bytes the level shares apply to (the hard limit times the soft share)."""
        return int(self.policy.hard_limit * self.soft_share)

    def threshold(self, level: Level) -> int:
        """Bytes at which ``level`` is entered."""
        p = self.policy
        if level is Level.HARD:
            return p.hard_limit
        share = {
            Level.OK: 0.0,
            Level.WARN: p.warn,
            Level.INTERVENE: p.intervene,
            Level.EMERGENCY: p.emergency,
        }
        return int(self.soft_limit * share[level])

    def growth(self) -> float:
        """RSS growth in bytes per minute over the window (0 until a tenth of it is seen)."""
        if len(self._history) < 2:
            return 0.0
        (t0, r0), (t1, r1) = self._history[0], self._history[-1]
        span = t1 - t0
        if span < self.policy.growth_window_s / 10:
            return 0.0
        return (r1 - r0) / span * 60.0

    def observe(self, now: float, rss: int) -> list[Transition]:
        """Take one sample; return the transitions it caused (soft limit first, then level)."""
        self.rss = rss
        self._remember(now, rss)
        out: list[Transition] = []
        before = self.level
        soft = self._adapt(now)
        if soft is not None:
            out.append(soft)
        level = self._level_for(rss)
        if level != self.level:
            self.level = level
            self.transitions[level] += 1
            out.append(self._transition("memory_level", before, level))
        return out

    def _remember(self, now: float, rss: int) -> None:
        history = self._history
        window = self.policy.growth_window_s
        while history and now - history[0][0] > window:
            history.popleft()
        # thin: keep one sample per window/MAX_HISTORY, but always the newest
        if len(history) >= 2 and history[-1][0] - history[-2][0] < window / MAX_HISTORY:
            history[-1] = (now, rss)
        else:
            history.append((now, rss))

    def _adapt(self, now: float) -> Transition | None:
        p = self.policy
        if now - self._last_adjust < p.soft_adjust_s:
            return None
        rate = self.growth()
        share = self.soft_share
        if rate > p.growth_bytes_per_min:
            share = max(p.soft_min, round(share - p.soft_step, 6))
        elif rate <= p.growth_bytes_per_min / 2 and share < 1.0:
            share = min(1.0, round(share + p.soft_step, 6))
        if share == self.soft_share:
            return None
        self.soft_share = share
        self._last_adjust = now
        self.soft_changes += 1
        return self._transition("memory_soft_limit", self.level, self.level)

    def _level_for(self, rss: int) -> Level:
        """The level for ``rss``: up at once, down only past the hysteresis band."""
        target = Level.OK
        for level in (Level.HARD, Level.EMERGENCY, Level.INTERVENE, Level.WARN):
            if rss >= self.threshold(level):
                target = level
                break
        if target >= self.level:
            return target
        band = int(self.soft_limit * self.policy.hysteresis)
        level = self.level
        # step down while RSS is clear of the current level's threshold by the band
        while level > target and rss < self.threshold(level) - band:
            level = Level(level - 1)
        return level

    def _transition(self, event: str, before: Level, after: Level) -> Transition:
        return Transition(
            event=event,
            before=before,
            after=after,
            rss=self.rss,
            soft_limit=self.soft_limit,
            hard_limit=self.hard_limit,
            growth_bytes_per_min=self.growth(),
        )
