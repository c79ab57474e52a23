"""``python -m loadtest.hesitation``: does kefu let a hesitating caller finish?

The sets (loadtest/eval/hesitation_en.jsonl, ``--lang zh``: hesitation_zh.jsonl): callers
who pause mid-sentence (``hesitant``), read out lists (``list``) or spell numbers in groups
(``spelled``), and controls without a pause (``complete`` statements and questions, ``short``
answers). Each item is spoken as :mod:`loadtest.hesitation_audio` says (piper for English, a
Kokoro voice that is not kefu's for Mandarin). 20 ms chunks go in real time (the speculative
decode races the audio) to a fresh :class:`Listener` per item (Silero VAD, one Whisper for
all: tiny.en, or the multilingual base for Mandarin; default config, ``speculative=True``).
Times are on the audio's clock, 0 ms at its first sample. Scores: :class:`Outcome`,
:func:`summarize`; Mandarin transcripts are scored by characters.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.hesitation_audio import SR, stimulus

SET_PATH = Path(__file__).resolve().parent / "eval" / "hesitation_en.jsonl"
SET_PATHS = {"en": SET_PATH, "zh": SET_PATH.with_name("hesitation_zh.jsonl")}
KINDS = ("hesitant", "list", "spelled", "complete", "short")
PAUSED_KINDS = ("hesitant", "list", "spelled")
SPLITS = ("dev", "heldout")
FRAME = 320  # 20 ms


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    segments: tuple[str, ...]
    pauses_ms: tuple[int, ...]
    """Silence between consecutive segments' voices (one per gap)."""
    kind: str
    split: str
    after: tuple[str, ...] = ()
    """What each pause follows (filler, preposition, article, list, digits...), if noted."""


def load_items(path: Path = SET_PATH, split: str = "all") -> list[Item]:
    items = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            d = json.loads(line)
            segs, pauses, after = (tuple(d.get(k, ())) for k in ("segments", "pauses_ms", "after"))
            if split in ("all", d["split"]):
                items.append(Item(d["id"], segs, pauses, d["kind"], d["split"], after))
    return items


def spread(items: Sequence[Item], limit: int | None) -> list[Item]:
    """The first ``limit`` items taking each kind in turn (file order kept), or all."""
    turn = [sum(x.kind == it.kind for x in items[:i]) for i, it in enumerate(items)]
    order = sorted(range(len(items)), key=lambda i: (turn[i], KINDS.index(items[i].kind)))
    keep = set(order[:limit])
    return [it for i, it in enumerate(items) if i in keep]


def check_items(items: Sequence[Item]) -> list[str]:
    """What is wrong with the set (empty: well-formed)."""
    ids = Counter(it.id for it in items)
    problems = []
    for it in items:
        lo, hi = (600, 1500) if it.kind == "hesitant" else (300, 2000)
        n_seg, n_pause, paused = len(it.segments), len(it.pauses_ms), it.kind in PAUSED_KINDS
        checks = {
            "duplicate id": ids[it.id] > 1,
            f"kind {it.kind!r}": it.kind not in KINDS,
            f"split {it.split!r}": it.split not in SPLITS,
            "empty segment": not n_seg or not all(s.strip() for s in it.segments),
            f"{n_pause} pauses for {n_seg} segments": n_pause != n_seg - 1,
            "'after' unlike the pauses": bool(it.after) and len(it.after) != n_pause,
            f"a {it.kind} item without a pause": paused and not n_pause,
            f"a {it.kind} item in {n_seg} segments": not paused and n_seg != 1,
            f"pause outside {lo}-{hi} ms": any(not lo <= p <= hi for p in it.pauses_ms),
        }
        problems += [f"{it.id}: {what}" for what, bad in checks.items() if bad]
    return problems


# -- one item through the Listener -----------------------------------------------------------


class _Recording:
    """The ASR, with every decode's text kept (speculative ones: what a hint read)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.texts: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    async def transcribe(self, pcm16k: Any, **kwargs: Any) -> Any:
        result = await self._engine.transcribe(pcm16k, **kwargs)
        self.texts.append(result.text)
        return result


@dataclass(frozen=True, slots=True)
class TurnEnd:
    turn_id: int
    at_ms: float
    speech_end_ms: float
    """Where the Listener put the end of the turn's voice (``at_ms``: when it decided)."""
    reason: str
    short: bool


@dataclass(frozen=True, slots=True)
class Outcome:
    id: str
    kind: str
    split: str
    pauses_ms: tuple[int, ...]
    turns: int
    cut_off: bool | None
    """A turn ended in a pause (None: the item has none)."""
    cut_gaps: tuple[int, ...]
    """Pauses (0-based) a turn ended in: its voice stopped before the next segment's began
    (the end may be decided as the caller resumes, before the VAD hears them)."""
    eot_delay_ms: float | None
    """The last end of turn minus the true end of speech (None: none after the last voice)."""
    reason: str | None
    """That end's reason (silence, semantic...)."""
    speech_end_err_ms: float | None
    """Where that turn's voice ended by the Listener minus the true end."""
    transcript: str
    wer: float
    late_ms: float
    """The most a 20 ms chunk reached the Listener after its time (a busy host)."""
    ends: tuple[TurnEnd, ...]
    finals: tuple[str, ...]
    decodes: tuple[str, ...]
    """Every Whisper decode, speculative ones included, in the order they finished."""


_NUMS = "zero one two three four five six seven eight nine".split()
_ZH_DIGITS = str.maketrans("零〇一幺二两三四五六七八九", "0011223456789")
"""Digits said one by one ("幺三八") and written ("138") score alike."""


def words(text: str, lang: str = "en") -> list[str]:
    """Lower-case words, digits one by one as words ("471" and "four seven one" agree); for
    Mandarin, its characters and digits one by one (punctuation and spaces dropped)."""
    if lang == "zh":
        from kefu.ai_bridge.listen.itn_zh import inverse_normalize_zh

        text = inverse_normalize_zh(text).lower().translate(_ZH_DIGITS)
        return re.findall(r"[\u4e00-\u9fff0-9a-z]", text)
    text = re.sub(r"\d", lambda m: f" {_NUMS[int(m.group())]} ", text.lower())
    text = re.sub(r"\boh\b", "zero", text.replace("-", " "))
    return re.sub(r"[^a-z' ]+", " ", text).split()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


async def run_item(item: Item, asr: Any, speed: float = 1.0, lang: str = "en") -> Outcome:
    """Feed one item to a fresh Listener in (``speed`` x) real time; score its events."""
    from kefu.ai_bridge.listen.heldout import _error_rate
    from kefu.ai_bridge.listen.listener import EndOfTurn, FinalTranscript, Listener, SpeechStarted
    from kefu.ai_bridge.listen.vad import SileroVad

    stim = stimulus(item, lang)
    loop = asyncio.get_running_loop()
    rec = _Recording(asr)
    vad = await loop.run_in_executor(None, SileroVad)
    t0 = loop.time()

    def clock() -> float:
        return t0 + (loop.time() - t0) * speed

    listener = Listener(
        rec, vad=vad, asr_language=lang, speculative=True, clock=clock, call_id=item.id
    )
    events: list[Any] = []

    def unfinished(final: type[Any] = EndOfTurn, opening: type[Any] = SpeechStarted) -> set[int]:
        """Turns opened (ended) and not ended (transcribed), after taking what came."""
        while not listener.events.empty():
            events.append(listener.events.get_nowait())
        done = {e.turn_id for e in events if isinstance(e, final)}
        return {e.turn_id for e in events if isinstance(e, opening)} - done

    late = 0.0
    try:
        for end in range(FRAME, len(stim.audio) + 1, FRAME):
            if end > stim.tail_end and not unfinished():
                break  # the tail is over and no turn is open
            wait = (t0 + end / SR - clock()) / speed
            if wait > 0:
                await asyncio.sleep(wait)
            now = clock()
            late = max(late, now - t0 - end / SR)
            listener.feed(stim.audio[end - FRAME : end], now)
        deadline = loop.time() + 15.0
        while unfinished(FinalTranscript, EndOfTurn) and (left := deadline - loop.time()) > 0:
            with contextlib.suppress(TimeoutError):
                events.append(await asyncio.wait_for(listener.events.get(), left))
    finally:
        await listener.close()
        await _idle(asr)
    ends = tuple(
        TurnEnd(e.turn_id, _ms(e.at - t0), _ms(e.speech_end_at - t0), e.reason, e.short)
        for e in events
        if isinstance(e, EndOfTurn)
    )
    finals = tuple(e.text for e in events if isinstance(e, FinalTranscript))
    starts = [_ms(a) for a, _ in stim.spans]
    cut_gaps = tuple(
        i
        for i in range(len(starts) - 1)
        if any(starts[i] <= e.speech_end_ms < starts[i + 1] for e in ends)
    )
    last = ends[-1] if ends and ends[-1].speech_end_ms >= starts[-1] else None
    true_end = _ms(stim.spans[-1][1])
    transcript = " ".join(t for t in finals if t)
    return Outcome(
        item.id,
        item.kind,
        item.split,
        item.pauses_ms,
        len(ends),
        bool(cut_gaps) if item.pauses_ms else None,
        cut_gaps,
        None if last is None else round(last.at_ms - true_end, 1),
        None if last is None else last.reason,
        None if last is None else round(last.speech_end_ms - true_end, 1),
        transcript,
        round(_error_rate(words(" ".join(item.segments), lang), words(transcript, lang)), 3),
        _ms(late),
        ends,
        finals,
        tuple(rec.texts),
    )


async def _idle(asr: Any) -> None:
    """Wait out the decode still running (a cancelled speculation ends on its thread): the
    next item starts on an idle ASR, and closing it stops no decode mid-way."""
    decodes = getattr(asr, "decodes", None)
    if decodes is not None:
        await asyncio.wrap_future(decodes.submit(lambda: None))


def load_asr(lang: str = "en") -> Any:
    """Whisper tiny.en, or for Mandarin the multilingual base kefu hears Mandarin with."""
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr

    asr = MultilingualWhisperAsr() if lang == "zh" else WhisperAsr()
    if not asr.ready:
        raise RuntimeError(asr.error)
    asr.transcribe_sync(np.zeros(SR, np.int16))  # warm-up: the first decode allocates
    return asr


async def run_items(
    items: Sequence[Item], asr: Any = None, speed: float = 1.0, lang: str = "en"
) -> list[Outcome]:
    """Each item in turn; the ASR is loaded (and closed) here when not given."""
    own = asr is None
    if asr is None:
        asr = await asyncio.get_running_loop().run_in_executor(None, load_asr, lang)
    try:
        return [await run_item(it, asr, speed, lang) for it in items]
    finally:
        if own:
            asr.close()


# -- report ----------------------------------------------------------------------------------


def _delays(outs: Sequence[Outcome]) -> dict[str, Any]:
    d = [o.eot_delay_ms for o in outs if o.eot_delay_ms is not None]
    pct = {f"p{q}": round(float(np.percentile(d, q)), 1) if d else None for q in (50, 95)}
    return {"n": len(d), **pct}


def _rate(outs: Sequence[Outcome]) -> dict[str, Any]:
    cut = sum(1 for o in outs if o.cut_off)
    return {"cut": cut, "n": len(outs), "rate": round(cut / len(outs), 3) if outs else None}


def summarize(outs: Sequence[Outcome], items: Sequence[Item] = ()) -> dict[str, Any]:
    paused = [o for o in outs if o.cut_off is not None]
    controls = [o for o in outs if o.kind in ("complete", "short")]
    after = {it.id: it.after for it in items}
    gaps = Counter(t for o in paused for t in after.get(o.id, ()))
    cut = Counter(t for o in paused for i, t in enumerate(after.get(o.id, ())) if i in o.cut_gaps)
    return {
        "items": len(outs),
        "cut_off": {"all": _rate(paused)}
        | {k: _rate([o for o in paused if o.kind == k]) for k in PAUSED_KINDS},
        "gaps_cut_by_after": {k: f"{cut[k]}/{gaps[k]}" for k in sorted(gaps)},
        "eot_delay_ms": {
            "complete+short": _delays(controls),
            "complete": _delays([o for o in controls if o.kind == "complete"]),
            "short": _delays([o for o in controls if o.kind == "short"]),
            "paused": _delays(paused),
        },
        "reasons": dict(sorted(Counter(o.reason for o in outs if o.reason).items())),
        "turns_per_item": {str(k): v for k, v in sorted(Counter(o.turns for o in outs).items())},
        "no_end_after_speech": [o.id for o in outs if o.eot_delay_ms is None],
        "wer_mean": round(float(np.mean([o.wer for o in outs])), 3) if outs else None,
        "late_ms_max": max((o.late_ms for o in outs), default=None),
    }


def evaluate(
    split: str = "dev", limit: int | None = None, speed: float = 1.0, lang: str = "en"
) -> tuple[dict[str, Any], list[Outcome]]:
    items = spread(load_items(SET_PATHS[lang], split), limit)
    t0 = time.monotonic()
    outs = asyncio.run(run_items(items, speed=speed, lang=lang))
    summary = {"lang": lang, "split": split, "speed": speed, **summarize(outs, items)}
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    return summary, outs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--lang", default="en", choices=tuple(SET_PATHS))
    parser.add_argument("--split", default="dev", choices=("dev", "heldout", "all"))
    parser.add_argument("--limit", type=int, default=None, help="N items, the kinds in turn")
    parser.add_argument("--json", dest="json_out", help="also write the full report here")
    parser.add_argument("--speed", type=float, default=1.0, help="audio seconds per second")


def main(args: argparse.Namespace) -> int:
    from kefu.mediaserver.logs import configure_logging

    configure_logging("warning")
    summary, outs = evaluate(args.split, args.limit, args.speed, args.lang)
    print(json.dumps(summary, separators=(",", ":")))
    if args.json_out:
        report = {"summary": summary, "items": [asdict(o) for o in outs]}
        Path(args.json_out).write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m loadtest.hesitation", description=__doc__)
    add_arguments(parser)
    sys.exit(main(parser.parse_args()))
