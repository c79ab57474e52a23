"""Knowledge-base phrasings said the way callers say them: with the thing they bought named.

Callers name their purchase ("is there a way to pay for the sofa in three monthly bits",
"我给我妈买的电饭锅都一个礼拜了还没动静"); the knowledge base's phrasings rarely do, while the
out-of-scope examples do all the time ("how much does this sofa cost", "你们卖电视吗": kefu
has no catalogue). Trained on those alone, the learned scorer (:mod:`.learned`) takes a
product's name for a sign of "out of scope" (measured on the dev split: p(out of scope) 0.54
for "…the same blender so I need to call mine off", 0.96 for the rice cooker above).

So each phrasing is also trained on once more inside a caller's framing that names a
product (:func:`product_variants`): the frame and the product are picked from the phrasing's
own text by a fixed hash, so the set is the same on every start and only changes when the
knowledge base does. The variants teach the scorer only; retrieval, BM25 and the intent
examples never see them.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from .kb import KbEntry

__all__ = ["FRAMES", "PRODUCTS", "product_variants"]

PRODUCTS: dict[str, tuple[str, ...]] = {
    "en": (
        "kettle",
        "sofa",
        "laptop",
        "phone",
        "TV",
        "washing machine",
        "fridge",
        "mattress",
        "coffee machine",
        "vacuum cleaner",
        "toaster",
        "microwave",
        "desk chair",
        "printer",
        "tablet",
        "speaker",
        "air fryer",
        "hair dryer",
        "bike",
        "wardrobe",
        "jacket",
        "pair of trainers",
        "lamp",
        "camera",
    ),
    "zh": (
        "电水壶",
        "沙发",
        "笔记本电脑",
        "手机",
        "电视",
        "洗衣机",
        "冰箱",
        "床垫",
        "咖啡机",
        "吸尘器",
        "微波炉",
        "椅子",
        "打印机",
        "平板",
        "音箱",
        "空气炸锅",
        "吹风机",
        "自行车",
        "衣柜",
        "外套",
        "运动鞋",
        "台灯",
        "相机",
        "电饭煲",
    ),
}
"""Things a retail caller may have bought (generic, not the bundled KB's words)."""

FRAMES: dict[str, tuple[str, ...]] = {
    "en": (
        "{q}, it's about the {p} I ordered",
        "I bought a {p} from you and {q}",
        "so about my {p}, {q}",
        "{q}? it's for a {p}",
    ),
    "zh": (
        "我买的{p}，{q}",
        "{q}，就是那个{p}",
        "关于我的{p}，{q}",
        "那个{p}啊，{q}",
    ),
}
"""A caller's framing around a phrasing ``{q}`` that names a product ``{p}``."""

_END = "?？。.!！ "


def product_variants(entries: Sequence[KbEntry]) -> tuple[list[str], list[int]]:
    """One framed variant of every question phrasing of ``entries`` in a language with
    frames: (texts, index into ``entries`` of each text)."""
    texts: list[str] = []
    rows: list[int] = []
    for i, entry in enumerate(entries):
        frames, products = FRAMES.get(entry.lang), PRODUCTS.get(entry.lang)
        if not frames or not products:
            continue
        for q in entry.phrasings():
            h = zlib.crc32(q.encode())
            frame = frames[h % len(frames)]
            product = products[(h // len(frames)) % len(products)]
            texts.append(frame.format(q=q.rstrip(_END), p=product))
            rows.append(i)
    return texts, rows
