"""In-process counters and a bounded latency recorder.

:class:`LatencyRecorder` keeps a fixed-size uniform sample (reservoir sampling),
so its memory is bounded however many slices run.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field


class LatencyRecorder:
    """Percentiles of durations (seconds) over a bounded uniform sample."""

    def __init__(self, capacity: int = 8192, seed: int = 0) -> None:
        self.capacity = capacity
        #: called with every duration added (the Prometheus exporter feeds a histogram)
        self.sinks: list[Callable[[float], None]] = []
        self.count = 0
        self.total = 0.0
        self._sample: list[float] = []
        self._rng = random.Random(seed)

    def add(self, seconds: float) -> None:
        """Record one duration."""
        self.count += 1
        self.total += seconds
        for sink in self.sinks:
            sink(seconds)
        if len(self._sample) < self.capacity:
            self._sample.append(seconds)
        else:
            slot = self._rng.randrange(self.count)
            if slot < self.capacity:
                self._sample[slot] = seconds

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile (0..100) of the sample, 0.0 when empty."""
        if not self._sample:
            return 0.0
        ordered = sorted(self._sample)
        index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
        return ordered[index]

    @property
    def mean(self) -> float:
        """Mean of all recorded durations."""
        return self.total / self.count if self.count else 0.0

    def reset(self) -> None:
        """Forget everything recorded."""
        self.count = 0
        self.total = 0.0
        self._sample.clear()


@dataclass
class RuntimeStats:
    """What one runtime did since it started. Counters only: bounded by construction."""

    slices: int = 0
    completions: int = 0
    compactions: int = 0
    compaction_failures: int = 0
    facts_found: int = 0  # memories a compaction extracted or moved out
    memories_dropped: int = 0  # memories a slice meant that the memory rules refused
    context_overflows: int = 0  # slices retried once with a smaller view
    inline_calls: int = 0
    slice_failures: int = 0
    leases_lost: int = 0
    tool_calls: int = 0
    tool_retries: int = 0
    tool_failures: int = 0
    #: tokens the model servers counted for this runtime's model calls (failed slices'
    #: calls included: they were paid for), as the replies' ``usage`` said
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    replies_cut: int = 0  # replies the output cap cut (finish_reason length)
    continuations: int = 0  # model calls that continued a cut reply
    refusals: int = 0  # replies refused (content filter, refusal): the slice failed
    #: waits for a person this runtime acted on, by outcome (approved, edited, denied,
    #: answered, expired, escalated): a fixed key set
    approvals: dict[str, int] = field(default_factory=dict)
    slice_latency: LatencyRecorder = field(default_factory=LatencyRecorder)
    model_latency: LatencyRecorder = field(default_factory=LatencyRecorder)  # one model call
    tool_latency: LatencyRecorder = field(default_factory=LatencyRecorder)  # one tool call, inline or async
    recall_latency: LatencyRecorder = field(default_factory=LatencyRecorder)  # a slice's registers + recall
