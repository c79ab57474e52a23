"""Does the caller front end help? Run with
``python3 -m pytest loadtest/bench_frontend.py --benchmark-enable -s`` (or as a script).

WER of Whisper tiny.en on the held-out questions (``KEFU_BENCH_FRONTEND_N`` of them, default
15) with white noise and babble (three other questions mixed) at 10/5/0 dB SNR, noisy vs
DeepFilterNet3-denoised, at 16 kHz and through G.711 µ-law at 8 kHz (noise added before the
codec, denoised after it, as kefu would). Also the denoiser's cost per 10 ms frame and the
speexdsp canceller's ERLE on a synthetic echo path with and without caller double-talk.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SNRS_DB = (10, 5, 0)
NOISES = ("white", "babble")


def _items(n: int) -> tuple[list[str], list[np.ndarray], Any]:
    from kefu.ai_bridge.listen.heldout import piper_voice, read_wav, synthesize_heldout

    voice = piper_voice()
    with tempfile.TemporaryDirectory() as tmp:
        items = synthesize_heldout(tmp, voice, limit=n)
        audio = [read_wav(it.path) for it in items]
    return [it.text for it in items], audio, voice


def _noise(kind: str, i: int, length: int, pool: list[np.ndarray], rng: Any) -> np.ndarray:
    if kind == "white":
        return rng.standard_normal(length)
    babble = np.zeros(length)
    for k in (1, 2, 3):  # three other talkers, each looped to cover the utterance
        other = pool[(i + k * 5) % len(pool)].astype(np.float64)
        babble += np.resize(np.roll(other, k * 4000), length)
    return babble


def _mix(clean: np.ndarray, noise: np.ndarray, snr_db: float) -> np.ndarray:
    p_s = np.mean(clean.astype(np.float64) ** 2)
    p_n = np.mean(noise**2)
    scaled = noise * np.sqrt(p_s / (p_n * 10 ** (snr_db / 10)))
    return np.clip(clean + scaled, -32768, 32767).astype(np.int16)


def wer_table(
    n: int, conditions: list[tuple[str, float | None]] | None = None
) -> list[dict[str, Any]]:
    from kefu.ai_bridge.frontend.denoise import denoise_buffer
    from kefu.ai_bridge.listen.asr.whisper import WhisperAsr
    from kefu.ai_bridge.listen.heldout import phone_8k, wer
    from kefu.codecs.resample import resample

    refs, clean, _ = _items(n)
    asr = WhisperAsr()
    assert asr.ready, asr.error
    rng = np.random.default_rng(7)

    def score(audio16: list[np.ndarray]) -> float:
        return 100 * statistics.mean(
            wer(r, asr.transcribe_sync(a).text) for r, a in zip(refs, audio16, strict=True)
        )

    def up(pcm8k: np.ndarray) -> np.ndarray:
        return resample(pcm8k, 8000, 16000)

    rows = []
    if conditions is None:
        conditions = [("clean", None)] + [(k, s) for k in NOISES for s in SNRS_DB]
    for kind, snr in conditions:
        if snr is None:
            noisy = clean
        else:
            noisy = [_mix(c, _noise(kind, i, len(c), clean, rng), snr) for i, c in enumerate(clean)]
        tel = [phone_8k(x) for x in noisy]
        row = {
            "noise": kind,
            "snr_db": snr,
            "wb_noisy": score(noisy),
            "wb_denoised": score([denoise_buffer(x, 16000) for x in noisy]),
            "g711_noisy": score([up(x) for x in tel]),
            "g711_denoised": score([up(denoise_buffer(x, 8000)) for x in tel]),
        }
        rows.append(row)
        print(
            f"{kind:7s} {'-' if snr is None else snr:>3} dB | 16k noisy {row['wb_noisy']:5.1f} "
            f"denoised {row['wb_denoised']:5.1f} | G.711 noisy {row['g711_noisy']:5.1f} "
            f"denoised {row['g711_denoised']:5.1f}",
            flush=True,
        )
    asr.close()
    return rows


def erle_table(voice: Any) -> list[dict[str, Any]]:
    from kefu.ai_bridge.frontend.aec import EchoCanceller, erle_db
    from kefu.ai_bridge.listen.heldout import speak
    from kefu.codecs.resample import resample

    far16 = speak(
        voice,
        "Thanks for calling. Your order shipped yesterday and should arrive on Friday. "
        "Is there anything else I can help you with today?",
    )
    caller16 = speak(voice, "Hold on, I have another question about my bill.", length_scale=1.1)
    rows = []
    for rate in (8000, 16000):
        far = resample(far16, 16000, rate) if rate != 16000 else far16
        h = np.zeros(int(0.03 * rate))
        h[0], h[5], h[17], h[int(0.02 * rate)] = 0.5, -0.2, 0.1, 0.05
        echo = np.convolve(far.astype(np.float64), h)[: len(far)]
        echo = np.concatenate([np.zeros(int(0.06 * rate)), echo])[: len(far)]
        talk = np.zeros(len(far))
        caller = resample(caller16, 16000, rate) if rate != 16000 else caller16
        start = len(far) - len(caller) - rate // 2  # double-talk in the converged half
        talk[start : start + len(caller)] = caller
        for double_talk in (False, True):
            near = np.clip(echo + (talk if double_talk else 0), -32768, 32767).astype(np.int16)
            aec = EchoCanceller(rate)
            outs = []
            for i in range(0, len(near), aec.frame_samples):
                aec.push_far(far[i : i + aec.frame_samples])
                outs.append(aec.process(near[i : i + aec.frame_samples]))
            out = np.concatenate(outs).astype(np.float64)
            half = len(out) // 2
            residual = out - (talk[: len(out)] if double_talk else 0)
            row = {
                "rate": rate,
                "double_talk": double_talk,
                "erle_all_db": erle_db(echo[: len(out)], residual),
                "erle_converged_db": erle_db(echo[half : len(out)], residual[half:]),
            }
            rows.append(row)
            print(
                f"AEC {rate} Hz double-talk={double_talk!s:5s} ERLE whole "
                f"{row['erle_all_db']:5.1f} dB, second half {row['erle_converged_db']:5.1f} dB",
                flush=True,
            )
    return rows


@pytest.fixture(scope="module")
def voice() -> Any:
    from kefu.ai_bridge.listen.heldout import piper_voice

    return piper_voice()


@pytest.mark.parametrize("in_rate", [48000, 16000, 8000])
def test_denoise_frame_cost(benchmark, in_rate: int) -> None:
    from kefu.ai_bridge.frontend.denoise import Denoiser

    den = Denoiser(in_rate, in_rate)
    assert den.ready, den.error
    rng = np.random.default_rng(0)
    frame = (rng.standard_normal(in_rate // 100) * 2000).astype(np.int16)
    benchmark(den.process, frame)
    benchmark.extra_info["model_ms_per_frame"] = round(den.ms_per_frame, 3)
    print(f"\ndenoise {in_rate} Hz: model {den.ms_per_frame:.3f} ms per 10 ms frame")
    den.close()


def test_aec_frame_cost(benchmark) -> None:
    from kefu.ai_bridge.frontend.aec import EchoCanceller

    aec = EchoCanceller(8000)
    rng = np.random.default_rng(0)
    near = (rng.standard_normal(160) * 2000).astype(np.int16)

    def step() -> None:
        aec.push_far(near)
        aec.process(near)

    benchmark(step)


def test_erle(benchmark, voice) -> None:
    rows = benchmark.pedantic(erle_table, args=(voice,), rounds=1, iterations=1)
    benchmark.extra_info["erle"] = rows
    assert all(r["erle_converged_db"] >= 15 for r in rows if not r["double_talk"])


@pytest.mark.timeout(1800)  # ~40 s per condition on 2 cores with the default 15 questions
def test_wer_noisy_vs_denoised(benchmark) -> None:
    n = int(os.environ.get("KEFU_BENCH_FRONTEND_N", "15"))
    rows = benchmark.pedantic(wer_table, args=(n,), rounds=1, iterations=1)
    benchmark.extra_info["wer"] = rows


if __name__ == "__main__":
    from kefu.ai_bridge.listen.heldout import piper_voice

    erle_table(piper_voice())
    wer_table(int(os.environ.get("KEFU_BENCH_FRONTEND_N", "15")))
