"""``python -m loadtest webrtc``: one aiortc caller in a kefu room, WAV in, WAV out.

Joins a room as a customer through kefu's ``/ws`` signaling, plays ``--wav`` (any rate, mono
or stereo) as its microphone in real time, records everything it hears to ``--record``
(mono 48 kHz) and leaves. With kefu in echo mode the recording carries the input's audio,
delayed by the round trip; :func:`best_correlation` measures how well.

The token is minted with the server's own HS256 secret, read exactly as ``kefu token`` reads
it (``--config`` / ``KEFU_*`` environment / ``[server] state_dir``), unless ``--token`` is
given. ``--weights OUT.jsonl`` writes every avatar weights frame received on the room's
``kefu-avatar`` channel as one JSON line (arrival ``t``, ``seq``, ``ts_ms``, 52 ARKit names);
``--video-record OUT.y4m`` asks for the avatar's video and writes it with ``OUT.y4m.times``
(one arrival time per frame); ``--record``'s ``OUT.wav.times`` holds the arrival of the first
sample. All three on one clock, ``time.time()`` in seconds.
``--relay-only`` forces TURN (RTCIceTransportPolicy.RELAY) with the TURN credentials
kefu hands out in ``joined``; no relay candidate within ``--gather-timeout`` is an error
with a readable message, not a hang.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

# aiortc is imported only when a call runs, so `python -m loadtest sip-echo --help` stays fast.
RATE = 48000
"""loadtest.webrtc_client's mono rate: everything played and recorded is 48 kHz."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", required=True, help="kefu's HTTP base URL, http://HOST:PORT")
    parser.add_argument("--wav", required=True, help="microphone input (16-bit PCM WAV)")
    parser.add_argument("--record", required=True, help="write what was heard here")
    parser.add_argument(
        "--seconds", type=float, default=None, help="call length (default: WAV + 1.5 s)"
    )
    parser.add_argument("--room", default=None, help="room to join (default: a fresh one)")
    parser.add_argument("--token", default=None, help="JWT to use instead of minting one")
    parser.add_argument("--config", default=None, help="kefu config file for the JWT secret")
    parser.add_argument("--relay-only", action="store_true", help="use TURN relay candidates only")
    parser.add_argument("--gather-timeout", type=float, default=5.0, metavar="S")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")
    parser.add_argument(
        "--video-record",
        default=None,
        metavar="OUT.y4m",
        help="ask for the avatar's video and write it (Y4M) with OUT.y4m.times, one arrival "
        "time (time.time()) per frame",
    )
    parser.add_argument(
        "--weights",
        metavar="OUT.jsonl",
        default=None,
        help="write each avatar weights frame received (kefu-avatar channel) as a JSON line",
    )


def write_weights(frames: list[tuple[float, bytes]], path: str | Path) -> tuple[int, int]:
    """Write ``(arrival time.time(), frame)`` pairs as JSON lines: ``{"t", "seq", "ts_ms",
    and the 52 weights by ARKit name}`` (docs/avatar.md). Frames that do not decode are
    skipped; returns (written, skipped)."""
    from kefu.ai_bridge.avatar.wire import WeightsFrameError, decode_frame, weights_to_json

    written = skipped = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for arrived, data in frames:
            try:
                frame = decode_frame(data)
            except WeightsFrameError:
                skipped += 1
                continue
            line = {"t": arrived, "seq": frame.sequence, "ts_ms": frame.timestamp_ms}
            line.update(weights_to_json(frame.weights))
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
            written += 1
    return written, skipped


def mint_dev_token(room: str, *, config_path: str | None = None, user: str | None = None) -> str:
    """A customer token pinned to ``room``, signed with the server's secret (as ``kefu token``)."""
    from kefu.mediaserver.config import jwt_secret, load_config
    from kefu.signaling.tokens import mint_token

    config = load_config(config_path)
    return mint_token(
        jwt_secret(config), user or f"loadtest-{secrets.token_hex(3)}", "customer", 600.0, room
    )


def ws_url(target: str) -> str:
    base = target.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base.removeprefix("https://") + "/ws"
    return "ws://" + base.removeprefix("http://") + "/ws"


def best_correlation(
    sent: np.ndarray, heard: np.ndarray, *, max_lag_s: float = 2.0
) -> tuple[float, float]:
    """(peak normalized cross-correlation, lag in seconds) of ``heard`` against ``sent``,
    both mono 48 kHz, for lags 0..``max_lag_s``. Computed at 8 kHz through one FFT: speech
    correlates fine in that band and it keeps a 10 s call well under 100 ms."""
    step = 6
    a = sent[::step].astype(np.float64)
    b = heard[::step].astype(np.float64)
    norm = float(np.sqrt(np.dot(a, a) * np.dot(b, b)))
    if norm == 0.0:
        return 0.0, 0.0
    size = 1 << int(np.ceil(np.log2(a.size + b.size)))
    corr = np.fft.irfft(np.fft.rfft(b, size) * np.conj(np.fft.rfft(a, size)), size)
    window = corr[: int(max_lag_s * RATE / step) + 1]
    lag = int(np.argmax(window))
    return float(window[lag]) / norm, lag * step / RATE


def tracked_correlation(
    reference: np.ndarray,
    heard: np.ndarray,
    *,
    loop: bool = False,
    max_lag_s: float = 2.0,
    window_s: float = 0.5,
) -> float:
    """How well ``heard`` follows ``reference`` (both mono 48 kHz) when the path may lose or
    stretch audio: the median, over the sounding ``window_s`` windows of ``heard``, of each
    window's peak normalized cross-correlation with ``reference`` near its neighbour's
    alignment. :func:`best_correlation` holds one alignment for the whole recording, so a
    single 20 ms slip (a lost packet, a late jitter buffer) halves its score; this one does not.

    ``heard`` lags ``reference`` by up to ``max_lag_s``, or leads it by up to ``window_s``
    (what was lost before the first packet arrived); with ``loop`` the reference was played
    in a loop (Chromium loops its fake-microphone file) and any offset into it fits. The
    alignment starts at the best-matching window and may move ±40 ms per window; holding each
    window to it keeps chance matches of unrelated audio (which peak anywhere) from scoring.
    """
    size = int(window_s * RATE)
    slack = RATE // 25
    heard = heard.astype(np.float64)
    ref = reference.astype(np.float64)
    if loop:
        n = len(ref)  # alignment = offset of heard[0] in the loop
        ref = np.tile(ref, 3)
    else:
        lag = int(max_lag_s * RATE)  # alignment i: heard is lag - i samples behind
        n = lag + size + 1
        ref = np.concatenate((np.zeros(lag), ref, np.zeros(size)))
    ref_energy = np.concatenate(([0.0], np.cumsum(ref * ref)))
    local = ref_energy[size:] - ref_energy[:-size]  # energy of every ``size`` slice of ref
    fft_size = 1 << int(np.ceil(np.log2(len(ref) + size)))
    ref_spectrum = np.fft.rfft(ref, fft_size)
    curves = []  # per sounding window: normalized correlation at each alignment
    for start in range(0, len(heard) - size + 1, size):
        window = heard[start : start + size]
        energy = float(np.dot(window, window))
        if energy < size * 300.0**2:  # a pause between words: nothing to compare
            continue
        corr = np.fft.irfft(ref_spectrum * np.conj(np.fft.rfft(window, fft_size)), fft_size)
        if loop:
            at = (np.arange(n) + start) % n + n
        else:
            at = np.minimum(start + np.arange(n), len(local) - 1)
        curves.append(corr[at] / np.sqrt(np.maximum(local[at], 1.0) * energy))
    if len(curves) < 4:
        return 0.0
    first = max(range(len(curves)), key=lambda i: float(np.max(curves[i])))
    scores = [float(np.max(curves[first]))]
    for order in (range(first + 1, len(curves)), range(first - 1, -1, -1)):
        offset = int(np.argmax(curves[first]))
        for i in order:
            near = np.arange(offset - slack, offset + slack + 1)
            near = near % n if loop else near[(near >= 0) & (near < n)]
            offset = int(near[np.argmax(curves[i][near])])
            scores.append(float(curves[i][offset]))
    return float(np.median(scores))


async def run_call(
    target: str,
    wav: str | Path,
    record: str | Path,
    *,
    seconds: float | None = None,
    room: str | None = None,
    token: str | None = None,
    config_path: str | None = None,
    relay_only: bool = False,
    gather_timeout_s: float = 5.0,
    weights: str | Path | None = None,
    video_record: str | Path | None = None,
) -> dict[str, Any]:
    """Join, play, record, leave; returns a summary (never raises for refusals: see ``error``).
    With ``weights``, the avatar frames received are written there (:func:`write_weights`);
    with ``video_record``, the client asks for the avatar's video and writes it there
    (:mod:`loadtest.video_record`)."""
    from loadtest.webrtc_client import (
        NoRelayCandidates,
        PacedPcmTrack,
        SignalingRefused,
        WebRtcClient,
        read_wav,
    )

    pcm = read_wav(wav)
    room = room or f"loadtest-{secrets.token_hex(4)}"
    token = token or mint_dev_token(room, config_path=config_path)
    seconds = seconds if seconds is not None else len(pcm) / RATE + 1.5
    from loadtest.video_record import Y4mRecorder

    recorder = Y4mRecorder(video_record) if video_record is not None else None
    client = WebRtcClient(
        mic=PacedPcmTrack(pcm),
        relay_only=relay_only,
        gather_timeout_s=gather_timeout_s,
        video=recorder,
    )
    summary: dict[str, Any] = {
        "target": target,
        "room": room,
        "relay_only": relay_only,
        "ok": False,
    }
    started = time.monotonic()
    try:
        joined = await client.connect_ws(ws_url(target), room, token=token, display="loadtest")
        summary["participant"] = joined.get("participant")
        await asyncio.wait_for(client.connected.wait(), 10.0)
        summary["connect_s"] = round(client.connect_time or 0.0, 3)
        await asyncio.sleep(seconds)
        await client.leave()
        summary["ok"] = True
    except (SignalingRefused, NoRelayCandidates) as exc:
        summary["error"] = str(exc)
    except TimeoutError:
        summary["error"] = f"not connected within 10 s (ICE state {client.pc.iceConnectionState})"
    finally:
        heard = client.heard()
        await client.close()
    client.record_to(record)
    if recorder is not None:
        recorder.close()
        summary["video_frames"] = recorder.frames
        summary["video_size"] = list(recorder.size) if recorder.size else None
    if weights is not None:
        written, skipped = write_weights(client.avatar_frames, weights)
        summary["weights_frames"] = written
        summary["weights_bad"] = skipped
    summary["seconds"] = round(time.monotonic() - started, 2)
    summary["heard_s"] = round(len(heard) / RATE, 2)
    summary["heard_rms"] = round(
        float(np.sqrt(np.mean(heard.astype(np.float64) ** 2))) if heard.size else 0.0, 1
    )
    if heard.size:
        corr, lag = best_correlation(pcm, heard)
        summary["echo_correlation"] = round(corr, 3)
        summary["echo_lag_s"] = round(lag, 3)
    return summary


def main(args: argparse.Namespace) -> int:
    summary = asyncio.run(
        run_call(
            args.target,
            args.wav,
            args.record,
            seconds=args.seconds,
            room=args.room,
            token=args.token,
            config_path=args.config,
            relay_only=args.relay_only,
            gather_timeout_s=args.gather_timeout,
            weights=args.weights,
            video_record=args.video_record,
        )
    )
    text = json.dumps(summary, indent=2)
    sys.stdout.write(text + "\n")
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    if not summary["ok"]:
        sys.stderr.write(f"webrtc: {summary.get('error', 'failed')}\n")
    return 0 if summary["ok"] else 1
