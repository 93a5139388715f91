"""The seeded scenario suite of ``dormant bench recall`` (pure: no I/O, no clock).

* ``subjects`` subjects (default 10,000); ``rich`` of them (default 600) have a
  six-month history, the others one record each. One rich subject in ten shares
  its phone with another rich subject on a different device.
* A rich subject's history: a shipping address changed 0-2 times and a contact
  channel changed 0-2 times (each change contradicts the one before: same key
  tag), a language, 2-4 orders (placed, boxed, dispatched events; a complaint
  about half of them, then an inquiry about the same order), 2-4 support calls
  (events: the newest is "the last call"), small talk.
* Records use "dispatched" and "boxed"; queries say "shipped" and "packed" —
  the words of the dictionary (:data:`DICTIONARY`) — or paraphrase with no
  shared word at all ("Where should parcels be delivered?").
* Each query names its subject, its ground-truth record(s), the superseded
  versions it must not return (``stale``), and ``at`` when it asks about the past.

Records are identified by their index in :attr:`Suite.records`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from ..memory.binding import bind
from ..memory.records import MemoryKind, TagValue

#: the binding secret of the suite's keys (any will do: the keys only have to be distinct)
BENCH_SECRET = b"recall-suite-binding-secret-000000"

DAY = 86_400.0
T0 = 1_780_000_000.0  # the start of the simulated history (mid-2026)
SPAN_DAYS = 180
T_END = T0 + SPAN_DAYS * DAY

DICTIONARY: list[list[str]] = [
    ["shipped", "dispatched", "sent out", "out for delivery"],
    ["packed", "boxed", "packaged"],
    ["complaint", "problem", "issue", "reported"],
    ["refund", "money back", "reimbursement"],
    ["address", "delivery address", "shipping address"],
]
STREETS = [
    "Oak Street",
    "Pine Road",
    "Maple Avenue",
    "Cedar Lane",
    "Elm Street",
    "Birch Way",
    "Willow Drive",
    "Harbor Road",
    "Mill Lane",
    "Station Road",
    "Church Street",
    "Park Avenue",
    "High Street",
    "Bridge Road",
    "Castle Street",
    "Orchard Close",
    "Meadow Way",
    "River Walk",
    "King Street",
    "Queen's Road",
]
CITIES = [
    "Springfield",
    "Dover",
    "Riverton",
    "Fairview",
    "Kingston",
    "Ashford",
    "Milton",
    "Bristol",
    "Newport",
]
CHANNELS = ["email", "SMS text messages", "a phone call", "WhatsApp", "postal letters", "the mobile app chat"]
LANGUAGES = ["English", "Spanish", "German", "French", "Mandarin", "Japanese", "Portuguese"]
PRODUCTS = [
    "red running shoes",
    "coffee grinder",
    "wool blanket",
    "desk lamp",
    "garden hose",
    "blue backpack",
    "electric kettle",
    "yoga mat",
    "phone charger",
    "winter jacket",
    "cast iron pan",
    "bluetooth speaker",
    "office chair",
    "water bottle",
    "leather wallet",
    "kids' bicycle",
    "rice cooker",
    "hiking boots",
    "wireless mouse",
    "bath towels",
    "mechanical keyboard",
    "sun hat",
    "tea set",
    "camping tent",
]
PROBLEMS = [
    "arrived damaged",
    "was missing a part",
    "was the wrong size",
    "stopped working after two days",
    "came in the wrong colour",
    "was charged twice",
]
CALL_TOPICS = [
    "a late delivery",
    "changing the payment card",
    "a discount code that did not work",
    "resetting the password",
    "the return label",
    "an invoice copy",
    "stock of a sold-out item",
    "cancelling a subscription",
]
SMALL_TALK = [
    "Mentioned that the weather in {city} was lovely this week.",
    "Asked about the opening hours of the store in {city}.",
    "Said they were preparing for a family trip to {city}.",
    "Thanked the agent for the quick answer last time.",
    "Asked whether gift wrapping is available for birthdays.",
    "Wondered if there is a loyalty programme for regular customers.",
    "Said they found the website easy to use.",
]


@dataclass(frozen=True, slots=True)
class SuiteRecord:
    """One record of the suite, added at ``at`` (simulated Unix time)."""

    subject: str
    kind: MemoryKind
    text: str
    tags: dict[str, TagValue]
    at: float


@dataclass(frozen=True, slots=True)
class SuiteQuery:
    """One query with its ground truth (indexes into the records)."""

    subject: str
    category: str
    text: str
    truth: frozenset[int]
    stale: frozenset[int] = frozenset()
    at: float | None = None


@dataclass(slots=True)
class Suite:
    """Records (in the order they are added) and queries."""

    records: list[SuiteRecord] = field(default_factory=list)
    queries: list[SuiteQuery] = field(default_factory=list)
    subjects: list[str] = field(default_factory=list)
    shared_phone_pairs: int = 0

    def add(self, subject: str, kind: MemoryKind, text: str, at: float, **tags: TagValue) -> int:
        """Append a record; its index."""
        self.records.append(SuiteRecord(subject, kind, text, dict(tags), at))
        return len(self.records) - 1


def _times(rng: random.Random, n: int) -> list[float]:
    return sorted(T0 + rng.uniform(0, SPAN_DAYS - 1) * DAY for _ in range(n))


def _address(rng: random.Random) -> str:
    return f"{rng.randint(1, 240)} {rng.choice(STREETS)}, {rng.choice(CITIES)}"


def _address_text(rng: random.Random, first: bool) -> str:
    if first:
        return f"Please ship my orders to {_address(rng)}."
    return f"I moved house; my new delivery address is {_address(rng)}."


def _channel_text(rng: random.Random, first: bool) -> str:
    if first:
        return f"I prefer to be contacted by {rng.choice(CHANNELS)}."
    return f"Please use {rng.choice(CHANNELS)} from now on instead."


def _rich(suite: Suite, rng: random.Random, key: str, order_ids: list[int]) -> None:
    recs: list[tuple[float, MemoryKind, str, dict[str, TagValue]]] = []
    queries: list[SuiteQuery] = []
    # contradicting facts: address and contact channel, each 1-3 versions
    versions: dict[str, list[tuple[float, str]]] = {}
    for key_tag, make in (("shipping_address", _address_text), ("contact_channel", _channel_text)):
        vs: list[tuple[float, str]] = []
        for i, t in enumerate(_times(rng, rng.randint(1, 3))):
            text = make(rng, i == 0)
            while any(text == old for _, old in vs):  # a change really changes something
                text = make(rng, i == 0)
            vs.append((t, text))
        versions[key_tag] = vs
    for key_tag, history in versions.items():
        kind: MemoryKind = "fact" if key_tag == "shipping_address" else "preference"
        for t, text in history:
            recs.append((t, kind, text, {"key": key_tag}))
    lang = rng.choice(LANGUAGES)
    recs.append((_times(rng, 1)[0], "preference", f"Would rather be served in {lang}.", {"key": "language"}))
    # orders: placed, boxed, dispatched; complaint then inquiry on half of them
    products = rng.sample(PRODUCTS, rng.randint(2, 4))
    order_texts: list[tuple[str, str, float, bool]] = []
    for product in products:
        order_ids[0] += 1
        ord_id = f"ORD-{order_ids[0]:06d}"
        t = T0 + rng.uniform(0, SPAN_DAYS - 20) * DAY
        recs.append((t, "event", f"Order {ord_id} for the {product} was placed.", {"order": ord_id}))
        recs.append(
            (
                t + 0.5 * DAY,
                "event",
                f"The {product} of order {ord_id} was boxed at the warehouse.",
                {"order": ord_id, "status": "boxed"},
            )
        )
        recs.append(
            (
                t + 1.5 * DAY,
                "event",
                f"Order {ord_id} was dispatched with the courier.",
                {"order": ord_id, "status": "dispatched"},
            )
        )
        complained = rng.random() < 0.5
        if complained:
            problem = rng.choice(PROBLEMS)
            recs.append(
                (
                    t + 4 * DAY,
                    "fact",
                    f"Complaint about order {ord_id}: the {product} {problem}.",
                    {"order": ord_id, "type": "complaint", "key": f"order:{ord_id}"},
                )
            )
            recs.append(
                (
                    t + 6 * DAY,
                    "fact",
                    f"Inquiry about order {ord_id}: when will the replacement arrive?",
                    {"order": ord_id, "type": "inquiry", "key": f"order:{ord_id}"},
                )
            )
        order_texts.append((ord_id, product, t, complained))
    for _ in range(rng.randint(3, 5)):
        recs.append((_times(rng, 1)[0], "event", rng.choice(SMALL_TALK).format(city=rng.choice(CITIES)), {}))
    # support calls: events never superseded; "the last call" is the newest one (recency matters)
    calls = [
        (t, f"Called the support line about {topic}.")
        for t, topic in zip(_times(rng, rng.randint(2, 4)), rng.sample(CALL_TOPICS, 4), strict=False)
    ]
    for t, text in calls:
        recs.append((t, "event", text, {"type": "call"}))
    recs.sort(key=lambda r: r[0])
    index: dict[str, int] = {}
    for t, kind, text, tags in recs:
        i = suite.add(key, kind, text, t, **tags)
        index[text] = i
    # queries
    for key_tag, question in (
        ("shipping_address", "Where should parcels for this customer be delivered?"),
        ("contact_channel", "How does the customer want us to get in touch?"),
    ):
        ids = [index[text] for _, text in versions[key_tag]]
        queries.append(SuiteQuery(key, key_tag, question, frozenset(ids[-1:]), frozenset(ids[:-1])))
        if len(ids) > 1:
            (t0, _), (t1, _) = versions[key_tag][0], versions[key_tag][1]
            queries.append(SuiteQuery(key, key_tag + "_past", question, frozenset(ids[:1]), at=(t0 + t1) / 2))
    queries.append(
        SuiteQuery(
            key,
            "last_call",
            "What did the customer phone us about most recently?",
            frozenset({index[calls[-1][1]]}),
        )
    )
    # "latest" questions: the newest complaint, and the current city (the customer may have
    # moved; the question shares no word with the records)
    complaints = sorted((t, index[text]) for t, _, text, tags in recs if tags.get("type") == "complaint")
    if complaints:
        queries.append(
            SuiteQuery(
                key, "latest_complaint", "What was the most recent complaint?", frozenset({complaints[-1][1]})
            )
        )
    addr_ids = [index[text] for _, text in versions["shipping_address"]]
    queries.append(
        SuiteQuery(
            key,
            "current_city",
            "Which city should the parcel go to?",
            frozenset(addr_ids[-1:]),
            frozenset(addr_ids[:-1]),
        )
    )
    for ord_id, product, _, complained in order_texts:
        queries.append(
            SuiteQuery(
                key,
                "shipped_synonym",
                f"Has my order {ord_id} been shipped yet?",
                frozenset({index[f"Order {ord_id} was dispatched with the courier."]}),
            )
        )
        queries.append(
            SuiteQuery(
                key,
                "packed_synonym",
                f"Was the {product} packed?",
                frozenset({index[f"The {product} of order {ord_id} was boxed at the warehouse."]}),
            )
        )
        if complained:
            truth = next(i for text, i in index.items() if text.startswith(f"Complaint about order {ord_id}"))
            queries.append(
                SuiteQuery(
                    key, "complaint", f"Did I report a problem with the {product}?", frozenset({truth})
                )
            )
    suite.queries.extend(queries)


def build_suite(*, subjects: int = 10_000, rich: int = 600, seed: int = 7) -> Suite:
    """The suite (deterministic for a seed)."""
    if not 1 <= rich <= subjects:
        raise ValueError("need 1 <= rich <= subjects")
    rng = random.Random(seed)
    suite = Suite()
    order_ids = [0]
    phones = [f"+1555{n:07d}" for n in rng.sample(range(10_000_000), subjects)]
    for i in range(subjects):
        phone = phones[i]
        if i < rich and i % 10 == 1:  # shares the phone of the previous rich subject
            phone = phones[i - 1]
            suite.shared_phone_pairs += 1
        key = bind({"phone": phone, "device": f"device-{i}"}, secret=BENCH_SECRET, tenant="")
        suite.subjects.append(key)
        if i < rich:
            _rich(suite, rng, key, order_ids)
        else:
            t = _times(rng, 1)[0]
            if rng.random() < 0.5:
                suite.add(
                    key, "fact", f"Please ship my orders to {_address(rng)}.", t, key="shipping_address"
                )
            else:
                suite.add(
                    key,
                    "preference",
                    f"I prefer to be contacted by {rng.choice(CHANNELS)}.",
                    t,
                    key="contact_channel",
                )
    return suite
