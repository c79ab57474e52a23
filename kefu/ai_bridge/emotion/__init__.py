"""Caller emotion: text sentiment + prosodic arousal, per-call smoothing, reply tone, escalation.

Pure building blocks, no asyncio and no event bus; the call agent wires them in::

    estimator = EmotionEstimator()          # once per process
    estimator.load()                        # blocking (~2 s): run in an executor
    tracker = EmotionTracker()              # once per call
    policy = EscalationPolicy()

    # per caller turn, in an executor (~15-35 ms on one core):
    emo = estimator.estimate(text, lang, pcm16k,
                             baseline=tracker.baseline,
                             previous_valence=tracker.previous_valence)
    state = tracker.update(emo)
    decision = policy.decide(state, failed_in_row, explicit_request,
                             call_id=call_id, turn_id=turn_id)
    tts_emotion = reply_emotion(emo, "answer")

Modules: :mod:`.values` (labels, :class:`CallerEmotion`, errors), :mod:`.text` (e5 classifier),
:mod:`.lexicon` (negation, intensity, profanity, sarcasm), :mod:`.prosody` (YIN pitch, level,
rate → arousal), :mod:`.speech` (:class:`SpeechEmotion`, ONNX loader; no model ships),
:mod:`.estimator` (fusion), :mod:`.tracker` (smoothing, baseline), :mod:`.policy` (reply tone,
escalation).
"""

from kefu.ai_bridge.emotion.estimator import EmotionEstimator, FusionSettings
from kefu.ai_bridge.emotion.policy import (
    REPLY_KINDS,
    EscalationDecision,
    EscalationPolicy,
    EscalationSettings,
    reply_emotion,
)
from kefu.ai_bridge.emotion.prosody import PopulationNorms, ProsodyBaseline
from kefu.ai_bridge.emotion.speech import OnnxSpeechEmotion, SpeechEmotion
from kefu.ai_bridge.emotion.text import TextSentimentModel
from kefu.ai_bridge.emotion.tracker import EmotionTracker, TrackerState
from kefu.ai_bridge.emotion.values import (
    EMOTIONS,
    CallerEmotion,
    EmotionError,
    ProsodyFeatures,
    SpeechEmotionError,
    TextSentiment,
)

__all__ = [
    "EMOTIONS",
    "REPLY_KINDS",
    "CallerEmotion",
    "EmotionError",
    "EmotionEstimator",
    "EmotionTracker",
    "EscalationDecision",
    "EscalationPolicy",
    "EscalationSettings",
    "FusionSettings",
    "OnnxSpeechEmotion",
    "PopulationNorms",
    "ProsodyBaseline",
    "ProsodyFeatures",
    "SpeechEmotion",
    "SpeechEmotionError",
    "TextSentiment",
    "TextSentimentModel",
    "TrackerState",
    "reply_emotion",
]
