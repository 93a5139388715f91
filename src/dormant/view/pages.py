"""The page manager: one policy for what a prompt keeps, summarizes, moves out and recalls.

A slice's prompt is a small window over a long life. :class:`PagePolicy` decides, in one
place and from configuration, what happens to each piece of it:

* **kept verbatim** — the newest messages after the summary. When compaction runs it
  keeps the newest ``keep`` share of the view, *weighted by information density*: a
  message costs its tokens divided by the density of its content class, so dense
  content (structured ticket data, 1.8) keeps its place longer than loose content
  (OCR text, 0.3) in the same small window. The text of a message's images counts at
  the ``ocr`` density (:meth:`PagePolicy.density`), the rest of it at its class's.
  Real tokens kept never pass half of the compaction threshold, whatever the weights,
  so one compaction always makes room.
  A single message over a quarter of the budget is shown head + tail
  (:func:`dormant.view.builder.clip`), whatever its class.
* **summarized** — when what a thread wrote since its summary passes ``compact_at``
  (85 % by default, after the write-up this project follows) of what a view holds
  (tokens, bytes or messages: :func:`dormant.slices.compaction.due`), everything older than
  the kept part is summarized by the model, never cutting a call from its results or
  a pending call (:func:`dormant.slices.compaction.cut_index`).
* **moved out to memory records** — with the same compaction call, the model returns
  durable facts (:mod:`dormant.memory.facts`); and tool results of the ``move_out`` classes
  (structured ticket data by default) that the summary covers are kept as memory
  records of the thread's subject, not only as a line of prose.
* **recalled back in** — before the model call, the subject's top memories are shown
  in a "memories" section of at most ``memories_share`` of the budget, and its
  registers in a "state" section of at most ``state_share``: both after the summary.
  Their shares are taken off the view's token budget *before* the view is loaded, so
  the budget rule (:mod:`dormant.view.budget`) counts them like everything else. An agent
  with no subject reserves nothing and pays nothing.

Pure logic: no I/O. The slice runner applies it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Final

import msgspec

from ..errors import UsageError
from ..memory.facts import Fact
from ..parts.render import PLACEHOLDER_TEXT_CHARS
from ..records import Message, ViewLimits
from .builder import message_bytes

if TYPE_CHECKING:
    from ..config import Settings

__all__ = [
    "DEFAULT_DENSITIES",
    "OCR",
    "TEXT",
    "Keep",
    "PagePolicy",
]

#: The content class of anything not declared otherwise.
TEXT: Final = "text"
#: The content class of an image's text (alt text or OCR) in a message.
OCR: Final = "ocr"
#: Information density per content class (after the write-up: text 1.0, OCR text 0.3,
#: structured ticket data 1.8).
DEFAULT_DENSITIES: Final[Mapping[str, float]] = MappingProxyType({TEXT: 1.0, OCR: 0.3, "structured": 1.8})


@dataclass(frozen=True, slots=True)
class Keep:
    """What compaction keeps verbatim: weighted budgets (a message costs its tokens and
    bytes divided by its density) and real caps (its tokens and bytes)."""

    tokens: int
    bytes: int
    messages: int
    cap_tokens: int
    cap_bytes: int
    weight: Callable[[Message], float]


def _frozen(mapping: Mapping[str, float] | Mapping[str, str]) -> Mapping[str, object]:
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, eq=False)  # eq=False: hashable by identity (its mappings are not)
class PagePolicy:
    """The page manager's configuration (see the module docstring for what each does).

    ``densities`` maps a content class to its information density (> 0); ``classes``
    maps a tool's name to the class of its results (unnamed tools, user and assistant
    text: ``"text"``). ``move_out`` names the classes whose summarized tool results
    become memory records. ``extract_facts`` False turns off the facts a compaction
    asks for (they are asked only of an agent with a subject, whose memory they go
    to). Raises :class:`UsageError` on a bad value.
    """

    compact_at: float = 0.85
    keep: float = 0.2
    densities: Mapping[str, float] = field(default_factory=lambda: DEFAULT_DENSITIES)
    classes: Mapping[str, str] = field(default_factory=dict)
    move_out: frozenset[str] = frozenset({"structured"})
    memories_share: float = 0.10
    state_share: float = 0.05
    extract_facts: bool | None = None
    #: characters of a moved-out tool result kept in its memory record
    move_out_chars: int = 2000

    def __post_init__(self) -> None:
        if not 0 <= self.compact_at <= 10:
            raise UsageError("compact_at must be within 0..10 (0: never compact)")
        if not 0 <= self.keep < 1:
            raise UsageError("keep must be within 0..1")
        if not 0 <= self.memories_share < 0.5 or not 0 <= self.state_share < 0.5:
            raise UsageError("memories_share and state_share must be within 0..0.5")
        if self.memories_share + self.state_share >= 0.5:
            raise UsageError("memories_share + state_share must leave history half the budget")
        if TEXT not in self.densities:
            object.__setattr__(self, "densities", {**self.densities, TEXT: 1.0})
        for name, density in self.densities.items():
            if not density > 0:
                raise UsageError(f"density of {name!r} must be > 0")
        for tool, kind in self.classes.items():
            if kind not in self.densities:
                raise UsageError(f"tool {tool!r} has class {kind!r}, which has no density")
        if self.move_out_chars < 64:
            raise UsageError("move_out_chars must be at least 64")
        object.__setattr__(self, "densities", _frozen(self.densities))
        object.__setattr__(self, "classes", _frozen(self.classes))

    @classmethod
    def from_settings(cls, settings: Settings) -> PagePolicy:
        """The policy of an agent that sets none: thresholds from ``settings``
        (``compaction_share``, ``compaction_keep``), the rest at defaults."""
        return cls(compact_at=settings.compaction_share, keep=settings.compaction_keep)

    # -- content classes -------------------------------------------------------------

    def kind_of(self, message: Message) -> str:
        """The content class of ``message``: its tool's, for a tool result; else text."""
        if message.role == "tool" and message.name:
            return self.classes.get(message.name, TEXT)
        return TEXT

    def density(self, message: Message) -> float:
        """The information density of ``message``: its content class's; for a message
        with images, the harmonic mean of that and :data:`OCR`'s (the images' text: alt
        text or OCR), weighted by their shares of its size, so that its weighed cost is
        each share's cost over its own density."""
        own = self.densities[self.kind_of(message)]
        if not message.parts:
            return own
        ocr_density = self.densities.get(OCR)
        if ocr_density is None:
            return own
        ocr = 4 * sum(
            len((p.text or "")[:PLACEHOLDER_TEXT_CHARS]) for p in message.parts if p.kind == "image"
        )
        if not ocr:
            return own
        share = min(1.0, ocr / max(1, message_bytes(message)))
        return 1.0 / ((1.0 - share) / own + share / ocr_density)

    # -- kept verbatim ---------------------------------------------------------------

    def keep_limits(self, limits: ViewLimits) -> Keep:
        """What compaction under ``limits`` keeps verbatim (see :class:`Keep`)."""
        cap = max(0.0, min(self.keep * max(self.densities.values()), self.compact_at / 2))
        return Keep(
            tokens=int(limits.max_tokens * self.keep),
            bytes=int(limits.max_bytes * self.keep),
            # else a view bounded only by its message cap never compacts
            messages=int(limits.max_messages * self.keep),
            cap_tokens=int(limits.max_tokens * cap),
            cap_bytes=int(limits.max_bytes * cap),
            weight=self.density,
        )

    # -- moved out -------------------------------------------------------------------

    def moved_out(self, covered: Sequence[Message]) -> tuple[Fact, ...]:
        """The tool results among ``covered`` (messages a new summary covers) that
        become memory records (events tagged with their tool and seq, their text cut to
        ``move_out_chars``): those of a ``move_out`` class."""
        if not self.move_out:
            return ()
        return tuple(
            Fact(
                text=m.content[: self.move_out_chars],
                tags={"tool": m.name or "", "seq": m.seq},
                kind="event",
            )
            for m in covered
            if m.role == "tool" and m.content.strip() and self.kind_of(m) in self.move_out
        )

    # -- recalled back in ------------------------------------------------------------

    def sections(self, limits: ViewLimits, *, subject: bool) -> tuple[int, int]:
        """Tokens the "memories" and "state" sections may take under ``limits`` (both 0
        for an agent without a subject: it reserves nothing)."""
        if not subject:
            return 0, 0
        return int(limits.max_tokens * self.memories_share), int(limits.max_tokens * self.state_share)

    def view_limits(self, limits: ViewLimits, *, subject: bool) -> ViewLimits:
        """``limits`` less the sections' shares: what the summary, history and the
        slice's new messages may take, so that with both sections full the request
        still fits the budget rule. Unchanged for an agent without a subject."""
        memories, state = self.sections(limits, subject=subject)
        if not memories and not state:
            return limits
        return msgspec.structs.replace(limits, max_tokens=max(1, limits.max_tokens - memories - state))
