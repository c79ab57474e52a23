"""Text-to-speech for the AI agent: streaming, emotional, with phoneme timings for lip-sync.

``Voice`` (router.py) is the entry point; engines implement ``TtsEngine`` (base.py).
"""

from kefu.ai_bridge.speak.base import EMOTIONS, PhonemeMark, TtsChunk, TtsEngine, TtsError
from kefu.ai_bridge.speak.cache import PhraseCache
from kefu.ai_bridge.speak.router import Voice

__all__ = ["EMOTIONS", "PhonemeMark", "PhraseCache", "TtsChunk", "TtsEngine", "TtsError", "Voice"]
