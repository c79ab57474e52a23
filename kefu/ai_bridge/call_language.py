"""Which language one call is answered in, and when a caller's switch is believed.

The mode comes from :func:`kefu.ai_bridge.listen.asr.language.call_language` (``en``, ``zh``
or ``auto``). A fixed mode never changes. An ``auto`` call answers in the language of the
first non-empty transcript, then keeps it: the multilingual recognizer only leaves the call's
language when identification is sure (``auto:xx`` hints), and this state follows what the
recognizer reports for each final transcript.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from kefu.ai_bridge.listen.asr.language import asr_hint

if TYPE_CHECKING:
    from kefu.ai_bridge.services import AiServices


@dataclass(slots=True)
class CallLanguage:
    """The mode of a call and the language it is answered in now."""

    mode: str
    """``en``, ``zh`` or ``auto``."""
    current: str
    """``en`` or ``zh``: what replies, apologies and fixed phrases are spoken in."""
    heard: bool = False
    """``auto``: a transcript has decided the language."""
    switches: int = 0
    """Times the caller changed language after the first decision."""

    @classmethod
    def start(cls, mode: str, first_greeting: str = "zh") -> CallLanguage:
        """A call in ``mode``; ``auto`` speaks ``first_greeting``'s language until it hears."""
        current = mode if mode in ("en", "zh") else first_greeting
        return cls(mode, current)

    @property
    def hint(self) -> str:
        """The language hint for the recognizer (see :func:`asr_hint`)."""
        return asr_hint(self.mode, self.current if self.heard else None)

    def observe(self, language: str, text: str) -> bool:
        """A final transcript in ``language``; True when the call's language changed."""
        if self.mode != "auto" or not text.strip() or language not in ("en", "zh"):
            return False
        first, self.heard = not self.heard, True
        if language == self.current:
            return False
        self.current = language
        self.switches += 0 if first else 1
        return True


def serveable_mode(services: AiServices, mode: str) -> str:
    """``mode``, or the language that can be served when its models did not load: an
    ``auto`` call without the multilingual recognizer is English; a Mandarin call keeps
    ``zh`` (it is apologised to and transferred, in Chinese when a Chinese voice works)."""
    mode = mode.lower()
    mode = "zh" if mode.startswith(("zh", "cmn")) else "en" if mode.startswith("en") else "auto"
    if mode == "auto" and services.asr_for("auto") is None:
        return "en"
    return mode
