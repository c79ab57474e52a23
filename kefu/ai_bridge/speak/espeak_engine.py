"""Chinese (and fallback English) voice: libespeak-ng 1.52 from ``espeakng-loader`` via ctypes.

Why ctypes and not the ``espeak-ng`` binary: the library API gives phoneme events with their
audio positions (for the avatar's lip-sync) and costs no process start per clause. Debian's
libespeak-ng 1.51 reads Hanzi badly with ``cmn``; the 1.52 build inside espeakng-loader
reads them correctly, so that one is loaded by path.

libespeak-ng keeps all its state in process globals (voice, parameters, the synth callback)
and is not thread-safe. Every call therefore goes through one :class:`EspeakLibrary` per
process, which owns a single worker thread and a lock; engines for different voices share
it. Synthesis runs in AUDIO_OUTPUT_SYNCHRONOUS mode: ``espeak_Synth`` returns only when the
whole clause has been delivered to the callback, which appends PCM and phoneme events.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import structlog
from numpy.typing import NDArray

from kefu.ai_bridge.speak.base import ClauseEngine, PhonemeMark, TtsChunk, TtsError
from kefu.ai_bridge.speak.clause_executor import ClauseExecutor
from kefu.ai_bridge.speak.emotion import EspeakStyle, espeak_style
from kefu.ai_bridge.speak.text import Segment, plan_clauses

log = structlog.get_logger(__name__)

# speak_lib.h (espeak-ng 1.52) constants.
_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_PHONEME_EVENTS = 0x0001
_INITIALIZE_PHONEME_IPA = 0x0002
_INITIALIZE_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_ENDPAUSE = 0x1000
_POS_CHARACTER = 1
_EVENT_LIST_TERMINATED = 0
_EVENT_END = 5
_EVENT_MSG_TERMINATED = 6
_EVENT_PHONEME = 7
_PARAM_RATE = 1
_PARAM_VOLUME = 2
_PARAM_PITCH = 3
_PARAM_RANGE = 4


class _EventId(ctypes.Union):
    _fields_ = [
        ("number", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("string", ctypes.c_char * 8),
    ]


class _Event(ctypes.Structure):
    """``espeak_EVENT`` from speak_lib.h."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event)
)


@dataclass(slots=True)
class _Collector:
    """What one ``espeak_Synth`` call produced; filled by the callback on the worker thread."""

    pcm: list[NDArray[np.int16]] = field(default_factory=list)
    phonemes: list[tuple[str, int]] = field(default_factory=list)
    end_ms: int | None = None


class EspeakLibrary:
    """The process's one handle on libespeak-ng: a worker thread, a lock, the callback."""

    # libespeak-ng's globals are per process, so the guard must be too: two libraries
    # created by mistake still never call into the C code at the same time.
    _process_lock: ClassVar[threading.Lock] = threading.Lock()
    # Which instance last configured the C globals (callback, voice). Another instance
    # (a second Voice, a test) re-points them, so the next call here must set them again;
    # otherwise espeak would call a callback whose owner may already be freed.
    _configured_by: ClassVar[int] = 0

    def __init__(self, library_path: str | None = None, data_path: str | None = None) -> None:
        self.executor = ClauseExecutor("espeak")
        self.sample_rate = 22050
        self._collector: _Collector | None = None
        self._voice: str | None = None
        self._lib: Any = None
        # Kept on the instance: ctypes would free the trampoline if nothing referenced it.
        self._callback = _SynthCallback(self._on_synth)
        self._library_path = library_path
        self._data_path = data_path

    def load(self) -> None:
        """Load and initialise the library (blocking; call it in :attr:`executor`)."""
        import espeakng_loader

        lib = ctypes.CDLL(self._library_path or espeakng_loader.get_library_path())
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint,
            ctypes.c_int,
            ctypes.c_uint,
            ctypes.c_uint,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        data = (self._data_path or espeakng_loader.get_data_path()).encode()
        options = _INITIALIZE_PHONEME_EVENTS | _INITIALIZE_PHONEME_IPA | _INITIALIZE_DONT_EXIT
        with self._process_lock:
            rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, data, options)
            if rate <= 0:
                raise TtsError(f"espeak_Initialize failed ({rate}) with data at {data!r}")
            lib.espeak_SetSynthCallback(self._callback)
            EspeakLibrary._configured_by = id(self)
            self._voice = None
        self.sample_rate = rate
        self._lib = lib

    def _on_synth(self, wav: Any, numsamples: int, events: Any) -> int:
        collector = self._collector
        if collector is None:
            return 1  # nobody is listening: ask espeak to abort
        if numsamples > 0 and wav:
            collector.pcm.append(np.ctypeslib.as_array(wav, shape=(numsamples,)).copy())
        i = 0
        while events[i].type != _EVENT_LIST_TERMINATED:
            ev = events[i]
            if ev.type == _EVENT_PHONEME:
                name = bytes(ev.id.string).split(b"\0", 1)[0].decode("utf-8", "replace")
                collector.phonemes.append((name, ev.audio_position))
            elif ev.type in (_EVENT_END, _EVENT_MSG_TERMINATED):
                collector.end_ms = ev.audio_position
            i += 1
        return 0

    def synth(self, voice: str, text: str, style: EspeakStyle) -> _Collector:
        """Synthesise one clause (blocking; only ever called on :attr:`executor`)."""
        if self._lib is None:
            raise TtsError("espeak library is not loaded")
        lib = self._lib
        data = text.encode("utf-8") + b"\0"
        collector = _Collector()
        with self._process_lock:
            if EspeakLibrary._configured_by != id(self):
                lib.espeak_SetSynthCallback(self._callback)
                EspeakLibrary._configured_by = id(self)
                self._voice = None
            if voice != self._voice:
                if lib.espeak_SetVoiceByName(voice.encode()) != 0:
                    raise TtsError(f"espeak-ng has no voice {voice!r}")
                self._voice = voice
            lib.espeak_SetParameter(_PARAM_RATE, style.rate, 0)
            lib.espeak_SetParameter(_PARAM_PITCH, style.pitch, 0)
            lib.espeak_SetParameter(_PARAM_RANGE, style.range, 0)
            lib.espeak_SetParameter(_PARAM_VOLUME, style.volume, 0)
            self._collector = collector
            try:
                err = lib.espeak_Synth(
                    data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8 | _ENDPAUSE, None, None
                )
            finally:
                self._collector = None
        if err != 0:
            raise TtsError(f"espeak_Synth failed with code {err}")
        return collector

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


class EspeakEngine(ClauseEngine[EspeakStyle]):
    """A :class:`~kefu.ai_bridge.speak.base.TtsEngine` over one espeak-ng voice."""

    def __init__(
        self,
        voice: str = "cmn",
        *,
        library: EspeakLibrary | None = None,
        languages: tuple[str, ...] | None = None,
    ) -> None:
        super().__init__(f"espeak-ng:{voice}")
        self.voice = voice
        self._owns_library = library is None
        self.library = library or EspeakLibrary()
        self.languages = languages or (("zh",) if voice in ("cmn", "yue", "zh") else ("en",))

    @property
    def sample_rate(self) -> int:
        return self.library.sample_rate

    @property
    def worker(self) -> concurrent.futures.Executor:
        return self.library.executor

    def load(self) -> None:
        """Load the library and check the voice speaks (blocking; run it in an executor)."""
        try:
            if self.library._lib is None:
                self.library.load()
            self.library.synth(self.voice, "1", espeak_style("neutral"))
            self.ready, self.error = True, None
        except (OSError, TtsError, ImportError) as exc:
            self.ready, self.error = False, f"{self.name}: {exc}"
            log.error("tts.load_failed", engine=self.name, error=str(exc))

    def render(self, clause: str, style: EspeakStyle, pause_ms: float = 0.0) -> TtsChunk:
        out = self.library.synth(self.voice, clause, style)
        sr = self.library.sample_rate
        pcm = np.concatenate(out.pcm) if out.pcm else np.zeros(0, dtype=np.int16)
        if pause_ms:
            pcm = np.concatenate([pcm, np.zeros(round(sr * pause_ms / 1000), np.int16)])
        total_ms = 1000.0 * len(pcm) / sr
        marks: list[PhonemeMark] = []
        starts = [float(pos) for _, pos in out.phonemes]
        for i, (name, _) in enumerate(out.phonemes):
            if not name.strip():
                continue
            end = starts[i + 1] if i + 1 < len(starts) else float(out.end_ms or total_ms)
            start = min(starts[i], total_ms)
            marks.append(PhonemeMark(name, start, max(0.0, min(end, total_ms) - start)))
        return TtsChunk(
            pcm=pcm.astype(np.int16, copy=False), sample_rate=sr, text=clause, phonemes=tuple(marks)
        )

    def plan(self, text: str, emotion: str, rate: float) -> list[Segment]:
        return plan_clauses(text, emotion=emotion, rate=rate)

    def style(self, segment: Segment) -> EspeakStyle:
        s = segment
        return espeak_style(s.emotion, rate=s.rate, pitch=s.pitch, volume=s.volume)

    def close(self) -> None:
        """Stop the worker thread if this engine made its own library."""
        if self._owns_library:
            self.library.close()
