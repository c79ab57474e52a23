"""Another shop's business: a caller who asks about an order, a refund or a repair from a
marketplace or another retailer ("我的京东快递到哪了", "my Amazon refund hasn't come through")
is told this line cannot see it, instead of this shop's answer to the same question.

Which shops count as *other* is a deployment setting (``[ai] other_shops``): a merchant that
also sells on a marketplace removes that marketplace from the list. :data:`OTHER_SHOPS` is the
list for the bundled retail sample, a shop of its own. Names are matched as whole words (Latin
script, any case) or as written (Chinese); a payment service named after a shop ("Amazon Pay",
"京东支付") is a way to pay here, not another shop's order.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

__all__ = ["OTHER_SHOPS", "other_shop"]

OTHER_SHOPS: tuple[str, ...] = (
    # Chinese marketplaces and retailers
    "京东",
    "淘宝",
    "天猫",
    "拼多多",
    "唯品会",
    "苏宁",
    "亚马逊",
    "闲鱼",
    "得物",
    "当当",
    "美团",
    "抖音商城",
    # English-speaking ones ("Target" left out: a common word)
    "Amazon",
    "eBay",
    "Argos",
    "Etsy",
    "Walmart",
    "Currys",
    "John Lewis",
    "IKEA",
    "AliExpress",
    "Temu",
    "Shein",
    "Wayfair",
    "Best Buy",
)

# Right after the name, a way to pay rather than a shop: "Amazon Pay", "京东支付", "京东白条".
_PAYMENT = r"(?!\s*(?:pay\b|支付|白条|金条|钱包))"


@lru_cache(maxsize=8)
def _pattern(names: tuple[str, ...]) -> re.Pattern[str] | None:
    parts = []
    for name in sorted({n.strip() for n in names if n.strip()}, key=len, reverse=True):
        escaped = re.escape(name).replace(r"\ ", r"\s*")
        if re.search(r"[A-Za-z0-9]", name):
            parts.append(rf"(?<![A-Za-z0-9]){escaped}(?:'?s)?(?![A-Za-z0-9]){_PAYMENT}")
        else:
            parts.append(escaped + _PAYMENT)
    return re.compile("|".join(parts), re.I) if parts else None


def other_shop(text: str, names: Sequence[str]) -> str | None:
    """The first of ``names`` (another shop) that ``text`` names, as the list spells it; None
    when it names none."""
    pattern = _pattern(tuple(names))
    found = pattern.search(text) if pattern is not None else None
    if found is None:
        return None
    said = re.sub(r"\s+", "", found.group(0)).lower()
    return max(
        (n for n in names if n.strip() and said.startswith(re.sub(r"\s+", "", n).lower())),
        key=len,
        default=found.group(0),
    )
