"""What a model's own tokens cost against dormant's count: a learned, bounded ratio.

dormant counts prompts in a known encoding (o200k_base unless the model names its own
tokenizer). Another model's tokenizer may cut the same text into more tokens: about
1.0x for English, 1.8x for digit-heavy logs, 2.6x for Russian or Chinese with a small
model's vocabulary. A model that :attr:`learns_tokens` (the OpenAI-compatible adapter
without a tokenizer of its own) teaches the budget that ratio from the server itself:
each reply's ``usage.prompt_tokens`` against dormant's estimate of the same request, and
each refusal that names the prompt's size ("request (3224 tokens) exceeds the available
context size") against the estimate of the refused request.

The ratio is conservative: it rises at once to what a request showed (with
:data:`HEADROOM`), falls only slowly (:data:`DECAY` of the gap a reply), never below
1.0 nor above :data:`MAX_RATIO`, and only requests of at least :data:`MIN_ESTIMATE`
tokens teach it (a short prompt is mostly template framing). The budget divides the
window by it (:func:`dormant.view.budget.limits_for`): counts stay in dormant's encoding,
and the byte proof (a token is at least one byte) is untouched.

Kept per model name in the process (:class:`TokenRatios`, at most :data:`MAX_MODELS`)
and on each thread, in its state journal under :data:`STATE_KEY`, committed with the
slice that used it (and its usage), so a restarted process does not overflow a thread
again to relearn it.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Final

import msgspec

from ..models.base import ModelRequest
from ..tokens import REPLY_PRIMING, TokenCounter

__all__ = [
    "DECAY",
    "HEADROOM",
    "MAX_MODELS",
    "MAX_RATIO",
    "MIN_ESTIMATE",
    "STATE_KEY",
    "TokenRatios",
    "estimate",
    "learned",
    "overflow_tokens",
    "quantize",
    "state_value",
    "stored_ratio",
]

#: Largest ratio kept (a byte-level tokenizer never needs more than 4 a byte; this bounds a bad sample).
MAX_RATIO: Final = 8.0
#: A sample is raised by this much before it is kept (the next prompt may be a little denser).
HEADROOM: Final = 1.05
#: Share of the gap to a lower sample the ratio moves down by, per reply.
DECAY: Final = 0.05
#: Estimates below this many tokens teach nothing (mostly chat-template framing).
MIN_ESTIMATE: Final = 128
#: Models with a ratio kept in one process (least recently used dropped first).
MAX_MODELS: Final = 256
#: Longest model name kept as a key.
MAX_NAME: Final = 256
#: The thread state key the ratio is kept under, as ``{"model": ..., "ratio": ...}``.
STATE_KEY: Final = "dormant.token_ratio"
#: Ratios are applied in steps of this size (rounded up), so few budgets are ever built.
STEP: Final = 0.05

# llama.cpp: "request (3224 tokens) exceeds the available context size (2048 tokens)";
# vLLM / OpenAI: "... your prompt contains 3224 tokens" / "you requested 3224 tokens"
_SIZE = re.compile(
    r"request \((\d+) tokens\)|prompt (?:contains|has) (\d+) (?:input )?tokens|"
    r"(?:resulted in|requested) (\d+) tokens",
    re.IGNORECASE,
)


class _Stored(msgspec.Struct, frozen=True):
    model: str
    ratio: float


def quantize(ratio: float) -> float:
    """``ratio`` rounded up to a :data:`STEP`, within [1, :data:`MAX_RATIO`]."""
    if not math.isfinite(ratio) or ratio <= 1.0:
        return 1.0
    return min(math.ceil(round(ratio / STEP, 6)) * STEP, MAX_RATIO)


def learned(previous: float, sample: float) -> float:
    """The ratio after one ``sample`` (real tokens / estimated tokens): up at once
    (with :data:`HEADROOM`), down by :data:`DECAY` of the gap; within [1, :data:`MAX_RATIO`]."""
    if not math.isfinite(sample) or sample <= 0:
        return previous
    target = sample * HEADROOM
    ratio = target if target > previous else previous - (previous - target) * DECAY
    return min(max(ratio, 1.0), MAX_RATIO)


def overflow_tokens(message: str) -> int | None:
    """The prompt size a server's context-overflow refusal names, if it names one."""
    match = _SIZE.search(message)
    if match is None:
        return None
    return int(next(group for group in match.groups() if group))


def estimate(request: ModelRequest, counter: TokenCounter, message_overhead: int = 3) -> int:
    """dormant's count of ``request`` as a prompt: system message and summary, every
    message (a stored count where the message has one), tool schemas as JSON, priming."""
    total = REPLY_PRIMING
    system = request.system + (request.summary or "")
    if system:
        total += counter.count("system", system) + max(0, message_overhead - 3)
    for message in request.messages:
        total += (message.tokens or counter.message(message)) + max(0, message_overhead - 3)
    if request.tools:
        total += counter.text(msgspec.json.encode(list(request.tools)).decode())
    return total


def stored_ratio(state: Mapping[str, str] | None, model: str) -> float:
    """The ratio a thread's state keeps for ``model`` (1.0: none, or for another model)."""
    if not state or STATE_KEY not in state:
        return 1.0
    try:
        stored = msgspec.json.decode(state[STATE_KEY], type=_Stored)
    except msgspec.DecodeError:
        return 1.0
    if stored.model != model[:MAX_NAME]:
        return 1.0
    return min(max(stored.ratio, 1.0), MAX_RATIO) if math.isfinite(stored.ratio) else 1.0


def state_value(model: str, ratio: float) -> str:
    """The JSON kept under :data:`STATE_KEY`."""
    return msgspec.json.encode(_Stored(model=model[:MAX_NAME], ratio=round(ratio, 4))).decode()


class TokenRatios:
    """The learned ratio of each model in this process. Thread-safe; bounded by
    :data:`MAX_MODELS` entries of a name (at most :data:`MAX_NAME` characters) and a float."""

    def __init__(self, max_models: int = MAX_MODELS) -> None:
        self.max_models = max_models
        self._lock = threading.Lock()
        self._ratios: OrderedDict[str, float] = OrderedDict()

    def get(self, model: str) -> float:
        """The ratio of ``model`` (1.0 until one was learned)."""
        with self._lock:
            return self._ratios.get(model[:MAX_NAME], 1.0)

    def raise_to(self, model: str, ratio: float) -> float:
        """Keep at least ``ratio`` for ``model`` (from a thread's state); the ratio now."""
        return self._set(model, lambda old: max(old, min(ratio, MAX_RATIO)))

    def observe(self, model: str, real: int, estimated: int) -> float:
        """Learn from one request dormant estimated at ``estimated`` tokens and the server
        counted at ``real``; the ratio now. Estimates under :data:`MIN_ESTIMATE` teach nothing."""
        if estimated < MIN_ESTIMATE or real <= 0:
            return self.get(model)
        return self._set(model, lambda old: learned(old, real / estimated))

    def _set(self, model: str, update: Callable[[float], float]) -> float:
        key = model[:MAX_NAME]
        with self._lock:
            old = self._ratios.get(key, 1.0)
            new = update(old)
            self._ratios[key] = new
            self._ratios.move_to_end(key)
            while len(self._ratios) > self.max_models:
                self._ratios.popitem(last=False)
            return float(new)

    def __len__(self) -> int:
        return len(self._ratios)
