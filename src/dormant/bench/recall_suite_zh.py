# ruff: noqa: RUF001, RUF002  (Chinese text uses full-width punctuation)
"""The Chinese suite of ``dormant bench recall`` (pure: no I/O, no clock).

The English suite's shape (:mod:`~dormant.bench.recall_suite`) written in Simplified
Chinese: an address that changes (搬到了厦门), a contact channel, a language, orders
(已下单, 已装箱, 已寄出), complaints about a product or the delivery (物流异常 ≈
快递停滞 ≈ 派送超时), inquiries, support calls, small talk. Records say 装箱 and
寄出; questions say 打包 and 发货 — the words of :data:`DICTIONARY_ZH` — or name a
delivery problem by another member of its group, or ask with no shared word at all
(包裹应该寄到哪个城市？). Chinese has no spaces: nothing here is pre-segmented.
"""

from __future__ import annotations

import random

from ..memory.binding import bind
from ..memory.records import MemoryKind, TagValue
from .recall_suite import BENCH_SECRET, DAY, SPAN_DAYS, T0, Suite, SuiteQuery

DICTIONARY_ZH: list[list[str]] = [
    ["发货", "寄出", "发出"],
    ["打包", "装箱", "包装"],
    ["物流异常", "快递停滞", "派送超时"],
    ["投诉", "反映", "问题"],
    ["退款", "退钱"],
    ["地址", "收货地址", "配送地址"],
]
CITIES = ["厦门", "杭州", "北京", "上海", "广州", "深圳", "成都", "南京", "武汉"]
STREETS = ["湖滨南路", "文三路", "中山路", "人民路", "解放路", "建设路", "和平路", "长江路", "滨江大道"]
CHANNELS = ["电子邮件", "短信", "电话", "微信", "邮寄信件", "手机应用内聊天"]
LANGUAGES = ["普通话", "粤语", "英语", "闽南语", "上海话"]
PRODUCTS = [
    "红色跑鞋",
    "咖啡研磨机",
    "羊毛毯",
    "台灯",
    "电水壶",
    "瑜伽垫",
    "手机充电器",
    "冬季外套",
    "铸铁锅",
    "蓝牙音箱",
    "办公椅",
    "保温杯",
    "皮夹",
    "电饭煲",
    "登山靴",
    "无线鼠标",
    "浴巾",
    "机械键盘",
    "茶具",
    "帐篷",
]
PROBLEMS = ["到货时已损坏", "缺少一个配件", "尺码不对", "用了两天就坏了", "颜色发错了"]
DELIVERY = DICTIONARY_ZH[2]
CALL_TOPICS = [
    "延迟送达",
    "更换支付卡",
    "优惠码无法使用",
    "重置密码",
    "退货标签",
    "发票抬头",
    "缺货商品",
    "取消订阅",
]
SMALL_TALK = [
    "提到{city}这周天气很好。",
    "询问{city}门店的营业时间。",
    "说准备带家人去{city}旅行。",
    "感谢客服上次的快速回复。",
    "询问生日礼物能否代为包装。",
    "问有没有老客户的会员计划。",
    "说网站很好用。",
]


def _times(rng: random.Random, n: int) -> list[float]:
    return sorted(T0 + rng.uniform(0, SPAN_DAYS - 1) * DAY for _ in range(n))


def _address(rng: random.Random, first: bool) -> str:
    city = rng.choice(CITIES)
    place = f"{city}市{rng.choice(STREETS)}{rng.randint(1, 240)}号"
    return f"请把我的订单寄到{place}。" if first else f"我搬到了{city}，新的收货地址是{place}。"


def _channel(rng: random.Random, first: bool) -> str:
    ch = rng.choice(CHANNELS)
    return f"我希望通过{ch}联系我。" if first else f"以后请改用{ch}联系我。"


def _rich(suite: Suite, rng: random.Random, key: str, order_ids: list[int]) -> None:
    recs: list[tuple[float, MemoryKind, str, dict[str, TagValue]]] = []
    versions: dict[str, list[tuple[float, str]]] = {}
    for key_tag, make in (("shipping_address", _address), ("contact_channel", _channel)):
        vs: list[tuple[float, str]] = []
        for i, t in enumerate(_times(rng, rng.randint(1, 3))):
            text = make(rng, i == 0)
            while any(text == old for _, old in vs):
                text = make(rng, i == 0)
            vs.append((t, text))
        versions[key_tag] = vs
        kind: MemoryKind = "fact" if key_tag == "shipping_address" else "preference"
        recs += [(t, kind, text, {"key": key_tag}) for t, text in vs]
    lang = rng.choice(LANGUAGES)
    recs.append((_times(rng, 1)[0], "preference", f"希望用{lang}为我服务。", {"key": "language"}))
    orders: list[tuple[str, str, str | None]] = []  # id, product, the complaint's delivery word
    for product in rng.sample(PRODUCTS, rng.randint(2, 4)):
        order_ids[0] += 1
        ord_id = f"ORD-{order_ids[0]:06d}"
        t = T0 + rng.uniform(0, SPAN_DAYS - 20) * DAY
        recs.append((t, "event", f"订单{ord_id}（{product}）已下单。", {"order": ord_id}))
        recs.append(
            (
                t + 0.5 * DAY,
                "event",
                f"订单{ord_id}的{product}已在仓库装箱。",
                {"order": ord_id, "status": "boxed"},
            )
        )
        recs.append(
            (
                t + 1.5 * DAY,
                "event",
                f"订单{ord_id}已寄出，由快递员揽收。",
                {"order": ord_id, "status": "sent"},
            )
        )
        word: str | None = None
        if rng.random() < 0.5:
            if rng.random() < 0.5:
                word = rng.choice(DELIVERY)
                text = f"投诉：订单{ord_id}的包裹{word}，{product}迟迟未到。"
            else:
                text = f"投诉：订单{ord_id}的{product}{rng.choice(PROBLEMS)}。"
            tags: dict[str, TagValue] = {"order": ord_id, "type": "complaint", "key": f"order:{ord_id}"}
            recs.append((t + 4 * DAY, "fact", text, tags))
            recs.append(
                (
                    t + 6 * DAY,
                    "fact",
                    f"咨询：订单{ord_id}的补发什么时候到？",
                    {"order": ord_id, "type": "inquiry", "key": f"order:{ord_id}"},
                )
            )
            orders.append((ord_id, product, word or ""))
        else:
            orders.append((ord_id, product, None))
    for _ in range(rng.randint(3, 5)):
        recs.append((_times(rng, 1)[0], "event", rng.choice(SMALL_TALK).format(city=rng.choice(CITIES)), {}))
    calls = [
        (t, f"客户致电客服，咨询{topic}。")
        for t, topic in zip(_times(rng, rng.randint(2, 4)), rng.sample(CALL_TOPICS, 4), strict=False)
    ]
    recs += [(t, "event", text, {"type": "call"}) for t, text in calls]
    recs.sort(key=lambda r: r[0])
    index: dict[str, int] = {}
    for t, kind, text, tags in recs:
        index[text] = suite.add(key, kind, text, t, **tags)
    qs: list[SuiteQuery] = []
    for key_tag, question in (
        ("shipping_address", "客户的收货地址是什么？"),
        ("contact_channel", "我们应该怎么联系客户？"),
    ):
        ids = [index[text] for _, text in versions[key_tag]]
        qs.append(SuiteQuery(key, key_tag, question, frozenset(ids[-1:]), frozenset(ids[:-1])))
        if len(ids) > 1:
            (t0, _), (t1, _) = versions[key_tag][0], versions[key_tag][1]
            qs.append(SuiteQuery(key, key_tag + "_past", question, frozenset(ids[:1]), at=(t0 + t1) / 2))
    addr = [index[text] for _, text in versions["shipping_address"]]
    qs.append(
        SuiteQuery(key, "current_city", "包裹应该寄到哪个城市？", frozenset(addr[-1:]), frozenset(addr[:-1]))
    )
    qs.append(SuiteQuery(key, "last_call", "客户最近一次来电是关于什么？", frozenset({index[calls[-1][1]]})))
    complaints = sorted((t, index[text]) for t, _, text, tags in recs if tags.get("type") == "complaint")
    if complaints:
        qs.append(SuiteQuery(key, "latest_complaint", "最近的投诉是什么？", frozenset({complaints[-1][1]})))
    for ord_id, product, word in orders:
        qs.append(
            SuiteQuery(
                key,
                "shipped_synonym",
                f"订单{ord_id}发货了吗？",
                frozenset({index[f"订单{ord_id}已寄出，由快递员揽收。"]}),
            )
        )
        qs.append(
            SuiteQuery(
                key,
                "packed_synonym",
                f"{product}打包了吗？",
                frozenset({index[f"订单{ord_id}的{product}已在仓库装箱。"]}),
            )
        )
        if word is None:
            continue
        truth = next(i for text, i in index.items() if text.startswith(f"投诉：订单{ord_id}"))
        qs.append(SuiteQuery(key, "complaint", f"我反映过{product}的问题吗？", frozenset({truth})))
        if word:
            other = rng.choice([w for w in DELIVERY if w != word])
            same = frozenset(
                i
                for text, i in index.items()
                if text.startswith("投诉：") and any(w in text for w in DELIVERY)
            )
            qs.append(SuiteQuery(key, "complaint_synonym", f"客户有没有反映过{other}？", same))
    suite.queries.extend(qs)


def build_suite_zh(*, subjects: int = 2_000, rich: int = 300, seed: int = 7) -> Suite:
    """The Chinese suite (deterministic for a seed)."""
    if not 1 <= rich <= subjects:
        raise ValueError("need 1 <= rich <= subjects")
    rng = random.Random(seed * 31 + 1)
    suite = Suite()
    order_ids = [0]
    for i in range(subjects):
        key = bind({"phone": f"+86138{i:08d}", "device": f"zh-{i}"}, secret=BENCH_SECRET, tenant="")
        suite.subjects.append(key)
        if i < rich:
            _rich(suite, rng, key, order_ids)
        else:
            t = _times(rng, 1)[0]
            if rng.random() < 0.5:
                suite.add(key, "fact", _address(rng, True), t, key="shipping_address")
            else:
                suite.add(key, "preference", _channel(rng, True), t, key="contact_channel")
    return suite
