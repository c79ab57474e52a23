"""Composition of one call's AI stages from configuration.

A :class:`PipelineSpec` says which stages a call runs; :func:`build_pipeline` turns it into a
:class:`Pipeline` of stage instances (:mod:`kefu.ai_bridge.stages`). The agent drives
whatever it is given: it never asks which stages exist beyond "is there a dialog / a voice".

* full voice call (the default): front end (if configured) → listen → dialog → speech;
* text-only (``speak=False``): answers are published as bot transcripts, never spoken;
* listen-only (``answer=False``): the caller is transcribed, nobody answers (a degraded call
  that waits for a human, a recording);
* emotion: a name in ``turn_stages``, built by a factory in :attr:`StageRegistry.turn_stages`;
* avatar: a name in ``speech_taps``, built by a factory in :attr:`StageRegistry.speech_taps`.

Adding one of these touches the registry and the spec, not the other stages or the agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import structlog

from kefu.ai_bridge.frontend.aec import EchoCanceller
from kefu.ai_bridge.frontend.chain import CallerFrontEnd
from kefu.ai_bridge.listen.endpoint import EndpointConfig
from kefu.ai_bridge.listen.listener import Listener
from kefu.ai_bridge.listen.vad import SileroVad
from kefu.ai_bridge.services import AiServices
from kefu.ai_bridge.settings import AiSettings
from kefu.ai_bridge.stages import (
    DialogStage,
    FrontEndStage,
    KbDialog,
    ListenStage,
    SpeechStage,
    SpeechTap,
    TurnStage,
    VoiceSpeech,
)

__all__ = [
    "FRONT_END_STAGES",
    "Pipeline",
    "PipelineSpec",
    "PipelineUnavailable",
    "StageContext",
    "StageRegistry",
    "build_listener",
    "build_pipeline",
    "check_names",
    "missing",
]

log = structlog.get_logger(__name__)

FRONT_END_STAGES = ("echo", "denoise")
"""Front-end stage names, in the order they run (AEC before the non-linear denoiser)."""


class PipelineUnavailable(Exception):
    """A stage the spec needs cannot run (its model is not loaded); the message says which."""


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    """Which stages one call runs."""

    frontend: tuple[str, ...] = ()
    """Front-end stages from :data:`FRONT_END_STAGES` (empty: the caller's audio as is)."""
    partials: bool = False
    """Live partial transcripts (pocketsphinx) in the listen stage."""
    turn_stages: tuple[str, ...] = ()
    """Stages between the ASR and the dialog, in order (the emotion stage's place)."""
    answer: bool = True
    """Run the dialog stage (False: listen-only, transcripts are published, nobody answers)."""
    speak: bool = True
    """Run the speech stage (False: text-only, answers are published, not spoken)."""
    speech_taps: tuple[str, ...] = ()
    """Stages that see each speech chunk on its way out, in order (the avatar's place)."""

    @classmethod
    def from_settings(cls, settings: AiSettings) -> PipelineSpec:
        """The ``[ai]`` settings' pipeline: the full voice loop with the configured front end."""
        frontend = tuple(
            name
            for name, on in (("echo", settings.echo_cancel), ("denoise", settings.denoise))
            if on
        )
        return cls(frontend=frontend, partials=settings.partials)


@dataclass(frozen=True, slots=True)
class StageContext:
    """What a stage factory may use to build its per-call instance."""

    services: AiServices
    """The process's shared models."""
    settings: AiSettings
    """The call's settings."""
    call_id: str
    """The call."""
    lang: str
    """The call's language mode (``en``, ``zh`` or ``auto``)."""


@dataclass(frozen=True, slots=True)
class StageRegistry:
    """Factories for the optional stages, by the name a :class:`PipelineSpec` uses."""

    turn_stages: Mapping[str, Callable[[StageContext], TurnStage]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """E.g. ``"emotion"`` (text sentiment + prosody, to come)."""
    speech_taps: Mapping[str, Callable[[StageContext], SpeechTap]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    """E.g. ``"avatar"`` (blendshapes from phoneme timings, to come)."""


@dataclass(slots=True)
class Pipeline:
    """One call's stage instances (None / empty: the stage is not in this call's chain)."""

    listen: ListenStage
    frontend: FrontEndStage | None = None
    turn_stages: tuple[TurnStage, ...] = ()
    dialog: DialogStage | None = None
    speech: SpeechStage | None = None
    speech_taps: tuple[SpeechTap, ...] = ()

    async def close(self, call_id: str) -> None:
        """Stop listening, release the front end, forget the call's dialog state."""
        await self.listen.close()
        if self.frontend is not None:
            self.frontend.close()
        if self.dialog is not None:
            await self.dialog.end_call(call_id)


def check_names(spec: PipelineSpec, registry: StageRegistry | None = None) -> None:
    """Raise ``KeyError`` for a stage name in ``spec`` that nobody registered."""
    registry = registry or StageRegistry()
    unknown = [
        *(n for n in spec.frontend if n not in FRONT_END_STAGES),
        *(n for n in spec.turn_stages if n not in registry.turn_stages),
        *(n for n in spec.speech_taps if n not in registry.speech_taps),
    ]
    if unknown:
        raise KeyError(f"no such stage(s): {unknown}")


def missing(services: AiServices, spec: PipelineSpec, lang: str) -> str | None:
    """Why ``spec`` cannot run for a call in ``lang`` (None: every stage it needs is loaded)."""
    if services.asr_for(lang) is None:
        return f"asr: {services.part('asr' if lang.startswith('en') else 'asr_zh').status}"
    needed = [n for n, on in (("dialog", spec.answer), ("tts", spec.speak)) if on]
    for name in needed:
        part = services.part(name)
        if not part.ready:
            return f"{name}: {part.status}"
    return None


async def build_pipeline(
    ctx: StageContext,
    spec: PipelineSpec,
    *,
    registry: StageRegistry | None = None,
    clock: Callable[[], float] | None = None,
) -> Pipeline:
    """Build the stages of ``spec`` for one call (blocking loads in executors).

    Raises :class:`PipelineUnavailable` when a stage it needs is not loaded, and ``KeyError``
    for a stage name nobody registered (a configuration error).
    """
    registry = registry or StageRegistry()
    check_names(spec, registry)
    loop = asyncio.get_running_loop()
    services = ctx.services
    turn_stages = tuple(registry.turn_stages[name](ctx) for name in spec.turn_stages)
    taps = tuple(registry.speech_taps[name](ctx) for name in spec.speech_taps)
    reason = missing(services, spec, ctx.lang)
    if reason is not None:
        raise PipelineUnavailable(reason)
    listener = await build_listener(ctx, partials=spec.partials, clock=clock)
    frontend = None
    if spec.frontend:
        frontend = await loop.run_in_executor(None, _build_frontend, ctx.call_id, spec.frontend)
    dialog = KbDialog(services.dialog) if spec.answer and services.dialog is not None else None
    if dialog is not None:
        listener.likely_end = dialog.prefetch
    speech = VoiceSpeech(services.voice) if spec.speak and services.voice is not None else None
    return Pipeline(listener, frontend, turn_stages, dialog, speech, taps)


async def build_listener(
    ctx: StageContext,
    *,
    partials: bool = False,
    barge_in: bool = True,
    speculative: bool = True,
    clock: Callable[[], float] | None = None,
) -> Listener:
    """The listen stage (Silero VAD endpointing + the call's ASR) for one voice of a call:
    the caller's, or a human agent's (``barge_in=False``: no
    :class:`~kefu.ai_bridge.listen.listener.SpeechSustained` cue;
    ``speculative=False``: one decode per turn, as nobody waits to answer it).

    Raises :class:`PipelineUnavailable` when the VAD or the language's ASR is not loaded.
    """
    loop = asyncio.get_running_loop()
    services, settings = ctx.services, ctx.settings
    asr = services.asr_for(ctx.lang)
    if asr is None:
        raise PipelineUnavailable(missing(services, PipelineSpec(), ctx.lang) or "asr")
    vad = await loop.run_in_executor(None, SileroVad)
    if not vad.ready:
        raise PipelineUnavailable(f"vad: {vad.error}")
    recognizer = None
    if partials:
        from kefu.ai_bridge.listen.asr.partials import PocketsphinxPartials

        recognizer = await loop.run_in_executor(None, PocketsphinxPartials)
    return Listener(
        asr,
        config=EndpointConfig(
            end_silence_ms=settings.end_silence_ms,
            open_end_silence_ms=max(settings.end_silence_ms, settings.hesitation_silence_ms),
        ),
        vad=vad,
        partials=recognizer if recognizer is not None and recognizer.ready else None,
        asr_language=ctx.lang,
        hotwords=settings.hotwords,
        speculative=speculative,
        clock=clock or loop.time,
        call_id=ctx.call_id,
        sustained_ms=settings.barge_in_min_ms if barge_in else None,
    )


def _build_frontend(call_id: str, names: tuple[str, ...]) -> CallerFrontEnd:
    """Echo cancellation and/or denoising before the caller's audio reaches the VAD."""
    from kefu.ai_bridge.frontend.denoise import Denoiser

    frontend = CallerFrontEnd(
        denoiser=Denoiser(16000, 16000, call_id=call_id) if "denoise" in names else None,
        echo=EchoCanceller(16000, call_id=call_id) if "echo" in names else None,
    )
    if not frontend.ready:
        log.warning("frontend_degraded", call_id=call_id, error=frontend.error)
    return frontend
