"""The language of a call: chosen per trunk, number or room, or heard (``ai.language = auto``).

:func:`call_language` picks the configured mode for one call: a SIP ``X-Kefu-Language`` header
from the call centre first, then the called number's longest matching prefix, the trunk's
source network, the room id's longest matching prefix, and ``ai.language`` last.

With ``auto`` the first utterance decides: it goes to the multilingual Whisper with free
language identification. From then on the call keeps that language (``auto:zh`` /
``auto:en`` hints, see :meth:`MultilingualWhisperAsr._pick_language`) unless identification
is :data:`~.whisper_multi.SWITCH_PROB` sure of the other one. English turns of an ``auto`` call
go to the faster tiny.en when it is loaded; a tiny.en transcript it is unsure of is checked
against the multilingual model, which may hear Mandarin.

:class:`LanguageRoutedAsr` is per call (it has no state of its own: the listener's
``asr_language`` hint is the call's state, set by the agent from each final transcript).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from .base import AsrEngine, AsrEngineBase, AsrResult
from .schedule import DecodeTicket

__all__ = [
    "LANGUAGE_MODES",
    "LanguageRoutedAsr",
    "asr_hint",
    "call_language",
    "check_language_map",
]

LANGUAGE_MODES = ("en", "zh", "auto")
LANGUAGE_HEADER = "X-Kefu-Language"
UNSURE_CONFIDENCE = 0.45
"""A tiny.en transcript below this confidence is checked by the multilingual model
(measured: clean English 0.83-0.95)."""


def _mode(value: str | None) -> str | None:
    if not value:
        return None
    value = value.strip().lower()
    if value.startswith(("zh", "cmn")):
        return "zh"
    if value.startswith("en"):
        return "en"
    return "auto" if value == "auto" else None


def _longest_prefix(key: str, table: Mapping[str, str]) -> str | None:
    best = max((p for p in table if key.startswith(p)), key=len, default=None)
    return None if best is None else table[best]


def call_language(
    default: str,
    *,
    header: str | None = None,
    called: str = "",
    source_host: str = "",
    room: str = "",
    by_number: Mapping[str, str] | None = None,
    by_trunk: Mapping[str, str] | None = None,
    by_room: Mapping[str, str] | None = None,
) -> str:
    """The language mode (``en``, ``zh`` or ``auto``) of one call."""
    chosen = _mode(header)
    if chosen is None and called and by_number:
        chosen = _mode(_longest_prefix(called.lstrip("+"), by_number))
    if chosen is None and source_host and by_trunk:
        chosen = _mode(_trunk_language(source_host, by_trunk))
    if chosen is None and room and by_room:
        chosen = _mode(_longest_prefix(room, by_room))
    return chosen or _mode(default) or "auto"


def _trunk_language(host: str, by_trunk: Mapping[str, str]) -> str | None:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
    matches = [
        (net, lang)
        for net, lang in ((ipaddress.ip_network(k, strict=False), v) for k, v in by_trunk.items())
        if address.version == net.version and address in net
    ]
    if not matches:
        return None
    return max(matches, key=lambda m: m[0].prefixlen)[1]


def check_language_map(table: Mapping[str, str], key: str, *, networks: bool = False) -> str:
    """The first problem of a ``language_by_*`` table ("" when fine)."""
    for name, value in table.items():
        if _mode(value) is None:
            return f"{key}: {name!r} maps to {value!r}; expected en, zh or auto"
        if networks:
            try:
                ipaddress.ip_network(name, strict=False)
            except ValueError:
                return f"{key}: {name!r} is not a network"
    return ""


def asr_hint(mode: str, current: str | None) -> str:
    """The listener's language hint: a fixed language, or ``auto[:current]``."""
    if mode in ("en", "zh"):
        return mode
    return f"auto:{current}" if current else "auto"


class LanguageRoutedAsr(AsrEngineBase):
    """An ``auto`` call's recognizer over the English and the multilingual engines."""

    name = "language-routed"

    def __init__(self, english: AsrEngine | None, multilingual: AsrEngine) -> None:
        super().__init__(("en", "zh"))
        self.english = english if english is not None and english.ready else None
        self.multilingual = multilingual
        self.ready = multilingual.ready
        self.error = multilingual.error

    async def _transcribe(
        self,
        pcm16k: NDArray[np.int16],
        language: str | None,
        hotwords: tuple[str, ...],
        ticket: DecodeTicket | None = None,
    ) -> AsrResult:
        hint = language or "auto"
        if hint == "auto:en" and self.english is not None:
            result = await self.english.transcribe(
                pcm16k, language="en", hotwords=hotwords, ticket=ticket
            )
            if result.text and result.confidence >= UNSURE_CONFIDENCE:
                return result
            checked = await self.multilingual.transcribe(
                pcm16k, language=hint, hotwords=hotwords, ticket=ticket
            )
            return checked if checked.language != "en" else result
        return await self.multilingual.transcribe(
            pcm16k, language=hint, hotwords=hotwords, ticket=ticket
        )
