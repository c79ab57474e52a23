"""What the bot says when it does not read a knowledge-base answer (both languages)."""

from __future__ import annotations

SAY: dict[tuple[str, str], str] = {
    (
        "fallback",
        "en",
    ): "I'm not sure about that — would you like me to connect you to a colleague?",
    ("fallback", "zh"): "这个问题我不太确定，需要为您转接人工客服吗？",
    ("other_shop", "en"): (
        "I can only see orders and accounts with us, so I can't check anything from {shop}."
        " Would you like me to connect you to a colleague?"
    ),
    (
        "other_shop",
        "zh",
    ): "我这边只能查询本店的订单和账户，{shop}的问题需要联系{shop}。需要为您转接人工客服吗？",
    ("handoff", "en"): "Of course, I'm connecting you to a colleague now.",
    ("handoff", "zh"): "好的，正在为您转接人工客服。",
    ("greeting", "en"): "Hello! How can I help you today?",
    ("greeting", "zh"): "您好！请问有什么可以帮您？",
    ("thanks", "en"): "You're welcome! Is there anything else I can help with?",
    ("thanks", "zh"): "不客气！还有其他可以帮您的吗？",
    ("goodbye", "en"): "Thank you for calling. Goodbye!",
    ("goodbye", "zh"): "感谢您的来电，再见！",
    ("declined", "en"): "No problem. What else can I help you with?",
    ("declined", "zh"): "好的。还有什么可以帮您？",
    ("what", "en"): "Sorry, what can I help you with?",
    ("what", "zh"): "不好意思，请问有什么可以帮您？",
    ("ask:order_number", "en"): "What's your order number?",
    ("ask:order_number", "zh"): "请问您的订单号是多少？",
    ("ask:phone", "en"): "What's the phone number on your account?",
    ("ask:phone", "zh"): "请问您账户绑定的手机号是多少？",
    ("ask:date", "en"): "Which date do you mean?",
    ("ask:date", "zh"): "请问是哪一天？",
    ("ask:amount", "en"): "What amount was it?",
    ("ask:amount", "zh"): "请问金额是多少？",
}


def say(key: str, lang: str) -> str:
    """The canned line ``key`` in ``lang`` (English when the language has none)."""
    return SAY.get((key, lang)) or SAY[(key, "en")]
