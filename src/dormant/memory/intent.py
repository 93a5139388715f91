"""What a recall question asks of time and structure, read from its words (pure, no I/O).

Vectors find "similar", not "newest" or "the current value of a fact". Before the
hybrid ranking, :func:`read_intent` looks for three things in a question, in English
and in Chinese:

* a **topic** that names a keyed fact or a kind of event — "which city / address"
  (地址, 寄到, 哪个城市), "how to contact" (联系方式), "complaint" (投诉, 反映),
  "refund" (退款), "call" (来电, 打电话), an attachment ("photo", "screenshot", "pdf",
  照片, 截图, 附件) — as :class:`Topic` names;
* a **latest** marker — "latest", "most recent", "current", "now", "last",
  最新, 最近, 现在, 目前, 当前, 上次 — asking for the newest matching record;
* a **period** — "last week", "past month", 上周, 最近一周, 上个月 — in days.

:func:`structural_match` then tells whether a record answers a topic: its key tag
(``shipping_address`` answers "address") or its type tag or kind (``complaint``).
The recall ranks those first (the current record of a key, the newest event of a
kind) and fills the rest of ``k`` with the hybrid ranking.

The vocabulary is :data:`TOPICS`; :class:`IntentVocabulary` extends it, and the
business dictionary extends it too: a synonym group that holds a topic's word
makes every member of the group a word of that topic (``物流异常 ≈ 快递停滞``).
Matching is by substring for CJK (a Chinese sentence has no spaces) and by whole
word elsewhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .fulltext import words
from .records import MemoryRecord

_CJK_CHAR = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")


@dataclass(frozen=True, slots=True)
class Topic:
    """One thing a question can ask about.

    ``words``: the words (EN, ZH) that name it in a question; ``tags``: the words a
    record's key tag or type tag holds when it is about this topic; ``keyed``: a fact
    with one current value (its valid record answers), else events (the newest answers
    a "latest" question).
    """

    name: str
    words: frozenset[str]
    tags: frozenset[str]
    keyed: bool


def _topic(name: str, keyed: bool, question: str, tags: str) -> Topic:
    return Topic(name, frozenset(question.split("|")), frozenset(tags.split("|")), keyed)


#: The default topics of a support desk (see the module docstring).
TOPICS: tuple[Topic, ...] = (
    _topic(
        "address",
        True,
        "address|addresses|city|town|delivery address|be delivered|delivered to|ship to|send it to|parcel go|"
        "parcels go|moved to|lives|live now|"
        "地址|收货地址|配送地址|寄到|送到|寄往|哪个城市|哪座城市|城市|搬到|住在|住址",
        "address|addr|location|city|shipping|地址",
    ),
    _topic(
        "contact",
        True,
        "contact|contacted|reach|get in touch|channel|phone or email|how to reach|联系方式|联系|联络|"
        "怎么联系|沟通方式|渠道",
        "contact|channel|联系",
    ),
    _topic(
        "language",
        True,
        "language|speak|served in|语言|说什么话|哪种语言",
        "language|lang|语言",
    ),
    _topic(
        "complaint",
        False,
        "complaint|complaints|complain|complained|problem|issue|reported|投诉|反映|问题|抱怨|不满",
        "complaint|problem|issue|投诉",
    ),
    _topic(
        "refund",
        False,
        "refund|refunds|refunded|money back|reimbursement|退款|退钱|退货",
        "refund|退款",
    ),
    _topic(
        "call",
        False,
        "call|called|calls|phoned|phone us|rang|来电|打电话|致电|电话",
        "call|phone|来电",
    ),
    _topic(
        "order",
        False,
        "order|orders|ordered|purchase|bought|订单|下单|购买",
        "order|订单",
    ),
    # what the user sent as an image or a document: its text is remembered (type
    # "attachment", dormant.slices.memory), so "the photo I sent last week" finds it
    _topic(
        "attachment",
        False,
        "photo|photos|picture|pictures|image|images|screenshot|screenshots|attachment|attachments|"
        "attached|pdf|scan|scanned|照片|图片|截图|附件|扫描件",
        "attachment|附件",
    ),
)

LATEST_WORDS = frozenset(
    [
        "latest",
        "most recent",
        "most recently",
        "recent",
        "recently",
        "newest",
        "current",
        "currently",
        "now",
        "last",
        "these days",
        "nowadays",
        "最新",
        "最近",
        "现在",
        "目前",
        "当前",
        "上次",
        "上一次",
        "最后",
        "最后一次",
        "如今",
    ]
)
#: period words and their length in days
PERIODS: Mapping[str, float] = {
    "today": 1,
    "yesterday": 2,
    "this week": 7,
    "past week": 7,
    "last week": 14,
    "last 7 days": 7,
    "this month": 31,
    "past month": 31,
    "last month": 62,
    "last 30 days": 30,
    "今天": 1,
    "昨天": 2,
    "本周": 7,
    "这周": 7,
    "上周": 14,
    "最近一周": 7,
    "本月": 31,
    "这个月": 31,
    "上个月": 62,
    "最近一个月": 31,
}


@dataclass(frozen=True, slots=True)
class Intent:
    """What a question asks: topics, whether the newest is wanted, a period in days."""

    topics: tuple[Topic, ...] = ()
    latest: bool = False
    period_days: float | None = None

    @property
    def structural(self) -> bool:
        """Whether structure can answer part of the question."""
        return bool(self.keyed or (self.events and (self.latest or self.period_days)))

    @property
    def keyed(self) -> tuple[Topic, ...]:
        """The topics that are keyed facts."""
        return tuple(t for t in self.topics if t.keyed)

    @property
    def events(self) -> tuple[Topic, ...]:
        """The topics that are kinds of events."""
        return tuple(t for t in self.topics if not t.keyed)

    def explain(self) -> str:
        """One line for ``explain=True``."""
        parts = [t.name for t in self.topics]
        if self.latest:
            parts.append("latest")
        if self.period_days:
            parts.append(f"period {self.period_days:g}d")
        return ", ".join(parts) or "none"


NONE = Intent()


def _is_cjk(term: str) -> bool:
    return bool(_CJK_CHAR.search(term))


def mentions(text: str, term: str) -> bool:
    """Whether ``text`` mentions ``term``: a substring for CJK, whole words otherwise."""
    if _is_cjk(term):
        return term in text
    want = words(term)
    toks = words(text)
    n = len(want)
    return bool(n) and any(toks[i : i + n] == want for i in range(len(toks) - n + 1))


@dataclass(frozen=True, slots=True)
class IntentVocabulary:
    """The topics and markers the recogniser knows (:data:`TOPICS` by default)."""

    topics: tuple[Topic, ...] = TOPICS
    latest: frozenset[str] = LATEST_WORDS
    periods: Mapping[str, float] = field(default_factory=lambda: dict(PERIODS))

    def extended(self, groups: Iterable[Sequence[str]]) -> IntentVocabulary:
        """This vocabulary with the dictionary's synonym groups: a group that shares a
        word with a topic gives that topic every word of the group."""
        out = []
        gs = [frozenset(g) for g in groups]
        for topic in self.topics:
            extra = {w for g in gs if g & (topic.words | topic.tags) for w in g}
            out.append(
                Topic(topic.name, topic.words | extra, topic.tags | extra, topic.keyed) if extra else topic
            )
        return IntentVocabulary(tuple(out), self.latest, self.periods)


DEFAULT_VOCABULARY = IntentVocabulary()


def read_intent(query: str, vocabulary: IntentVocabulary = DEFAULT_VOCABULARY) -> Intent:
    """The :class:`Intent` of ``query`` (:data:`NONE` for an empty one)."""
    text = query.casefold()
    if not text.strip():
        return NONE
    topics = tuple(t for t in vocabulary.topics if any(mentions(text, w) for w in t.words))
    latest = any(mentions(text, w) for w in vocabulary.latest)
    days = [d for w, d in vocabulary.periods.items() if mentions(text, w)]
    return Intent(topics=topics, latest=latest, period_days=min(days) if days else None)


def _tag_words(value: object) -> str:
    return str(value).casefold().replace("_", " ").replace("-", " ").replace(":", " ")


def structural_match(
    record: MemoryRecord, topic: Topic, key_tag: str = "key", type_tag: str = "type"
) -> bool:
    """Whether ``record`` is about ``topic``: its key tag (keyed topics) or its type tag,
    kind or text (event topics) names one of the topic's tag words."""
    if topic.keyed:
        value = record.tags.get(key_tag)
        return value is not None and any(mentions(_tag_words(value), w) for w in topic.tags)
    kind = record.tags.get(type_tag)
    if kind is not None and any(mentions(_tag_words(kind), w) for w in topic.tags):
        return True
    if record.tags.get(key_tag) is not None:
        return False  # a keyed record answers keyed topics, not event ones
    text = record.text.casefold()
    return any(mentions(text, w) for w in topic.words if len(w) > 1)
