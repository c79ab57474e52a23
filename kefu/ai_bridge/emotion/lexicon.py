"""Cheap lexical cues that sentence embeddings miss: negation, intensity, profanity, sarcasm.

Embeddings place "I'm not happy" near "I'm happy" and "great, just great, it's lost again"
near genuine praise, so a few hand-written patterns (English and Mandarin, applied to every
utterance because callers switch languages mid-sentence) correct the embedding classifier:

* **negated positive** ("not happy", "不满意", "一点都不好") moves mass from happy to angry/sad;
* **negated negative** ("not bad", "no problem", "没问题", "没关系") moves mass to neutral;
* **intensifier** ("very", "absolutely", "!!", SHOUTED WORDS, "非常", "太…了", "！！")
  sharpens the distribution;
* **profanity** (en + zh, with care for innocent look-alikes such as 操作, 可靠, 垃圾短信)
  pushes towards angry;
* **sarcasm**: a fixed marker ("great, just great", "thanks for nothing", "yeah right",
  "真是太好了呢", "呵呵", "可真行") or a positive opener followed by a complaint ("perfect, so
  now I have no internet"), or positive words right after a negative turn.

The patterns are deliberately few and precise: a wrong cue costs more than a missed one,
because the embedding classifier is right most of the time without them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Cues", "find_cues"]

_POS_WORDS = (
    r"happy|satisfied|pleased|helpful|good|great|impressed|glad|acceptable|okay|ok|fine|"
    r"fair|professional|useful"
)
_NEG_POSITIVE_EN = re.compile(
    rf"\b(?:not|never|hardly|barely|no longer|isn'?t|wasn'?t|aren'?t|\w+n't)\s+"
    rf"(?:\w+\s+){{0,2}}?(?:{_POS_WORDS})\b",
    re.IGNORECASE,
)
_NEG_POSITIVE_ZH = re.compile(
    r"不(?:太|怎么|是很|够)?(?:满意|开心|高兴|舒服|专业|靠谱|合理|像话)|"
    r"一点(?:都|也)?不(?:好|满意|行|专业)|很不好|不好用|没用(?!户|过)"
)
_NEG_NEGATIVE_EN = re.compile(
    r"\b(?:not bad|no problem|not a problem|no worries|not an issue|nothing wrong|"
    r"don'?t worry|no rush|no hurry|never mind that)\b",
    re.IGNORECASE,
)
_NEG_NEGATIVE_ZH = re.compile(r"没问题|不错|不要紧|没关系|没事|不麻烦|不客气|不着急|不急")

_INTENSIFIER_EN = re.compile(
    r"\b(?:very|really|extremely|totally|absolutely|completely|incredibly|super|so much|"
    r"such|utterly|seriously|way too|at all)\b",
    re.IGNORECASE,
)
_INTENSIFIER_ZH = re.compile(r"非常|特别|极其|极了|超级|实在|十分|相当|真的|太\S{1,4}了|简直|根本")
_EXCLAIM = re.compile(r"[!！]{2,}")
_SHOUTED = re.compile(r"\b[A-Z]{3,}\b")

_PROFANITY_EN = re.compile(
    r"\b(?:damn\w*|dammit|hell|shit\w*|crap\w*|bullshit|fuck\w*|f+\*+\w*|wtf|bloody|"
    r"asshole|arse\w*|piss\w*|bastard\w*|screw (?:you|this|that)|sucks?)\b",
    re.IGNORECASE,
)
_PROFANITY_ZH = re.compile(
    r"他妈的?|妈的|尼玛|草泥马|卧槽|我靠|(?<![可依停倚])靠[，,!！]|^靠|我操|操你|操蛋|"
    r"傻[逼Bb比]|煞笔|\bsb\b|垃圾(?!短信|邮件|电话|分类|桶|袋)|给我滚|滚开|坑爹|狗屎|去死|"
    r"破(?:服务|公司|系统|东西|玩意|app|APP|手机|网)",
    re.IGNORECASE,
)

_SARCASM_EN = re.compile(
    r"\b(great|wonderful|fantastic|perfect|brilliant|lovely|awesome|terrific|super),?\s+"
    r"just\s+\1\b|"
    r"\boh,?\s+(?:great|wonderful|fantastic|perfect|brilliant|lovely|joy|goody)\b|"
    r"\bthanks? (?:you )?for nothing\b|\byeah,?\s+right\b|\bjust what i (?:needed|wanted)\b|"
    r"\bexactly what i (?:needed|wanted)\b|\bthanks a (?:lot|bunch|million) for\b|"
    r"\bwell done,? (?:guys|you)\b|\bgood job (?:losing|breaking|ignoring)\b",
    re.IGNORECASE,
)
_SARCASM_ZH = re.compile(
    r"真是太好了呢|太好了呢|呵呵|可真行|真行啊|真有你(?:们)?的|服了你们|真是服了|好棒哦|"
    r"真棒啊|厉害了我的|谢谢你们啊|可真够|真够可以的|太负责了|效率真高啊"
)
_POS_OPENER = re.compile(
    r"^\W*(?:oh,?\s+|wow,?\s+|well,?\s+)?(?:great|wonderful|fantastic|perfect|brilliant|"
    r"lovely|awesome|nice|terrific|thanks|thank you|super|excellent|"
    r"太好了|真好|好棒|真棒|谢谢|厉害|不错|真行|完美|棒)",
    re.IGNORECASE,
)
_THANKS = re.compile(r"^\W*(?:thanks|thank you|谢谢|感谢)", re.IGNORECASE)
_COMPLAINT = re.compile(
    r"\b(?:again|still|never|lost|losing|broken|broke|crash\w*|nobody|no one|wrong|"
    r"twice|no (?:internet|signal|service|refund|reply|answer)|doesn'?t work|not working|"
    r"didn'?t (?:arrive|work|come)|waiting|on hold|cancel\w*|overcharged)\b|"
    r"又|还没|还是没|没收到|丢了|坏了|扣了|没人|闪退|不能用|用不了|等了|错了|重启|停机|没到",
    re.IGNORECASE,
)
# A caller who names their feeling ("I'm so angry", "我真的很担心") means it; embeddings of a
# long question let the question drown the feeling out. Negated ("not angry", "不生气") and
# second-person ("don't be upset") forms do not count.
_STATED_EN = re.compile(
    r"\b(?:i am|i'?m|im|i feel|i'?m feeling|i am feeling|i'?m getting|i get|makes me|"
    r"making me|i'?ve been)\s+(?:(?:so|really|very|extremely|absolutely|pretty|getting|"
    r"quite|totally|incredibly|just)\s+)*"
    r"(angry|furious|mad|livid|pissed(?: off)?|annoyed|irritated|fed up|frustrated|upset|"
    r"worried|scared|afraid|anxious|nervous|panicking|sad|disappointed|heartbroken|"
    r"devastated|happy|delighted|thrilled|glad)\b",
    re.IGNORECASE,
)
_STATED_ZH = re.compile(
    r"(?<![不别没])(生气|气死|火大|愤怒|恼火|烦死|气炸|受够了|担心|害怕|着急|焦虑|"
    r"难过|伤心|失望|郁闷|开心|高兴)"
)
_STATED_LABEL = {
    **dict.fromkeys(
        "angry furious mad livid pissed annoyed irritated fed frustrated upset "
        "生气 气死 火大 愤怒 恼火 烦死 气炸 受够了".split(),
        "angry",
    ),
    **dict.fromkeys(
        "worried scared afraid anxious nervous panicking 担心 害怕 着急 焦虑".split(), "fearful"
    ),
    **dict.fromkeys("sad disappointed heartbroken devastated 难过 伤心 失望 郁闷".split(), "sad"),
    **dict.fromkeys("happy delighted thrilled glad 开心 高兴".split(), "happy"),
}
_STATED_NOT = re.compile(r"\b(?:not|never|n't)\s+(?:\w+\s+)?$", re.IGNORECASE)


def stated_feeling(text: str) -> str:
    """The emotion the caller names ("I'm so angry" → angry), or "" (none, or negated)."""
    for m in (*_STATED_EN.finditer(text), *_STATED_ZH.finditer(text)):
        if _STATED_NOT.search(text[: m.start(1)]):
            continue
        word = m.group(1).lower().split()[0]
        return _STATED_LABEL.get(word, "")
    return ""


_RESOLVED = re.compile(
    r"\b(?:found|fixed|solved|resolved|sorted|arrived|works? now|working now|back on|"
    r"that works|it works|that helps)\b|"
    r"解决了|找到了|修好了|到了|能用了|(?<![太真挺])好了",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Cues:
    """The lexical cues found in one utterance."""

    negated_positive: bool = False
    """A positive word under negation ("not happy", "不满意")."""
    negated_negative: bool = False
    """A negative word under negation ("not bad", "没问题")."""
    intensity: int = 0
    """Number of intensifiers, repeated exclamation marks and shouted (ALL CAPS) words."""
    profanity: int = 0
    """Number of swear words and insults."""
    sarcasm: bool = False
    """A sarcasm marker, or a positive opener followed by an unresolved complaint."""
    positive_opener: bool = False
    """The utterance opens with praise or thanks."""
    praise_opener: bool = False
    """It opens with praise other than thanks ("great.", "太好了"): sarcastic right after a
    negative turn unless something was resolved."""
    resolved: bool = False
    """A word of resolution ("fixed", "found", "works now", "解决了", "到了")."""
    complaint: bool = False
    """A complaint word ("again", "lost", "又", "没收到") and no word of resolution."""
    stated: str = ""
    """The feeling the caller names ("I'm so angry", "我很担心"), "" when none."""

    def names(self) -> tuple[str, ...]:
        """The names of the cues that fired, for logs and :class:`CallerEmotion.cues`."""
        out = []
        if self.negated_positive or self.negated_negative:
            out.append("negation")
        if self.intensity:
            out.append("intensifier")
        if self.profanity:
            out.append("profanity")
        if self.sarcasm:
            out.append("sarcasm")
        if self.stated:
            out.append(f"stated:{self.stated}")
        return tuple(out)


def find_cues(text: str) -> Cues:
    """Scan ``text`` with both languages' patterns (callers mix Mandarin and English)."""
    resolved = bool(_RESOLVED.search(text))
    complaint = bool(_COMPLAINT.search(text)) and not resolved
    opener = bool(_POS_OPENER.search(text))
    shouted = _SHOUTED.findall(text)  # one capitalised word is usually an acronym (PIN, SIM)
    marker = bool(_SARCASM_EN.search(text) or _SARCASM_ZH.search(text))
    intensity = (
        len(_INTENSIFIER_EN.findall(text))
        + len(_INTENSIFIER_ZH.findall(text))
        + len(_EXCLAIM.findall(text))
        + (len(shouted) if len(shouted) >= 2 else 0)
    )
    return Cues(
        negated_positive=bool(_NEG_POSITIVE_EN.search(text) or _NEG_POSITIVE_ZH.search(text)),
        negated_negative=bool(_NEG_NEGATIVE_EN.search(text) or _NEG_NEGATIVE_ZH.search(text)),
        intensity=intensity,
        profanity=len(_PROFANITY_EN.findall(text)) + len(_PROFANITY_ZH.findall(text)),
        sarcasm=marker or (opener and complaint),
        positive_opener=opener,
        praise_opener=opener and not _THANKS.search(text),
        resolved=resolved,
        complaint=complaint,
        stated=stated_feeling(text),
    )
