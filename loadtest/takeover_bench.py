"""``python -m loadtest takeover``: an agent takes a call over mid-answer and hands it back,
timed on the wire at the SIP caller.

::

    python -m loadtest takeover --target-sip HOST:PORT --target-http http://HOST:PORT \\
        [--cycles N] [--concurrent-agents K] [--ai-calls M] [--kefu-pid PID] [--json OUT]

A round is K SIPp callers (``uac_echo``, G.711 µ-law, started ``--stagger`` s apart) plus M
callers nobody takes over, all under one tshark capture of their media ports. Every caller
plays the same script (seconds from its first RTP packet):

* 5.0 "Where is your nearest store?" (Q1: the KB answer lasts about 10 s);
* 13.5 "Thank you Maria, that is very helpful." (said to the agent, during the takeover);
* 21.5 "Do you take gift cards?" (Q2, to the AI again), then 9 s of silence.

Each of the K callers has an agent in this process: :func:`loadtest.agent_client.run_agent`
(the flow of ``python -m loadtest agent``) on the call found in ``GET /api/calls`` by SIPp's
SIP port in its From URI. The agent joins the call's room at once and listens; once the
caller's first ``transcript.final`` has come it waits to hear the bot's answer in the room
(``agent_heard_answer_ms`` after it began at the caller) and clicks takeover ``--cut-in`` s
later (about 1 s into the answer at the caller), plays :data:`AGENT_LINE` (piper, noise 0)
after :data:`AGENT_LEAD_S` of digital silence and followed by :data:`AGENT_LISTEN_S` of
silence, and hands back 1 s later.

What is measured, per takeover (times are this host's UNIX clock: the capture's timestamps,
the agent's marks and the API's, all on one machine):

``bot_stop_ms``
    takeover click (``t_click``, just before the POST) → arrival at the caller of the last
    kefu → caller packet that carries the bot's voice (decoded RMS ≥ 300). Bot frames are the
    voiced frames from the start of the answer up to the first agent frame (below); nothing
    voiced can be the agent's before the agent's first voiced frame left its microphone.
    Negative when the bot was between words at the click (``bot_talking_at_click`` false).
    ``bot_last_audible_ms``: the same for the last packet louder than digital silence (RMS ≥
    30, the codec's fade-out of the bot's last syllable included).
    ``bot_after_click_repeat``: whether the bot audio after the click replays what the caller
    had already heard (normalised correlation with the second before it; ``similarity`` ≥ 0.8)
    and how much earlier (``earlier_ms``): the room's delayed copy of the bot, not new speech.
``first_agent_audio_ms``
    click → the first packet at the caller that carries the agent's voice, less the WAV's own
    leading silence: (mic's first WAV frame − click) + ``agent_path_ms``.
``agent_path_ms``
    the agent's first voiced frame leaving its microphone (the mic's first WAV frame + 20 ms
    per frame before it: paced in real time) → that frame at the caller (Opus, the SFU, the
    room's mix, G.711). Agent frames are recognised by content: the received
    voiced frames are lined up with the WAV's voiced 20 ms frames (the delay that lines most
    of them up), and a voiced frame counts as the agent's when the WAV is voiced within two
    frames of it. ``foreign_voiced_frames``: voiced frames after the agent's first with no
    voiced WAV frame within five frames (the bot leaking through would show here).
``takeover_api_ms`` / ``handback_api_ms``
    the POST's round trip (``python -m loadtest agent``'s own numbers).
``next_answer_latency_ms``
    after the hand-back, the caller's Q2: its speech end on the wire → the first voiced
    kefu → caller packet after it (``python -m loadtest voice``'s latency).
    ``handback_to_answer_ms`` is hand-back click → that packet (it includes the script's wait
    before Q2); ``ai_spoke_before_q2``: a voiced packet between the hand-back and Q2.
``downlink``
    kefu → caller packets: SSRCs seen, sequence gaps, and ``skipped_frames``: 20 ms frames
    of RTP timestamp that kefu's sender skipped (a timestamp jump with no sequence gap: a
    sender that fell behind and dropped audio, or a jump in its clock at a switch of source;
    the caller's jitter buffer plays either as a gap), over the call and within the takeover
    (``skipped_in_takeover``).
caller frames (``caller_frames``)
    * on the wire: the caller → kefu packets in the capture, their RTP sequence gaps
      (``lost_on_wire``), duplicates and reordering: what SIPp sent, all of it seen;
    * at the agent: the caller's voiced 20 ms frames (decoded RMS ≥ 300) that arrived at kefu
      between the takeover's answer (``t_ack``) and the hand-back click, and how many of them
      the agent heard: a frame counts as heard when the agent's track of the caller (the
      room's ``phone`` participant: the received track that lines up best with what the caller
      sent) has a frame with RMS ≥ 150 within 40 ms of its arrival + the caller → agent delay
      (``lag_ms``: the delay that lines the two up best within the takeover, on a 10 ms grid,
      then the one within ±20 ms that matches the most frames; the track is the one that
      lines up best over the whole call); each received frame
      matches one sent frame at most (the nearest; within 10 ms first, then 40 ms).
      ``lost`` = voiced sent − heard;
    * at kefu's RTP endpoint (what feeds the ASR and the room): ``GET /api/calls``'s
      ``rtp.received`` and ``rtp.lost`` just after the agent left, against the caller packets
      the capture saw arrive before that request (``not_received``);
    * what kefu's ASR made of them: the caller's ``transcript.final`` of the thanks (said during
      the takeover) and of Q2, and the share of the reference words in each.

``meets_100ms``: the bot was talking at the click (a voiced bot frame in the 200 ms before
it), its voice stopped within 100 ms of the click (``bot_stop_ms`` ≤ 100) and no foreign
voiced frame came during the agent's turn. With ``--kefu-pid`` the CPU of kefu
(the process and its children, /proc/PID/stat) is sampled every 0.25 s and reported over each
round and over the stretch when all K agents held their calls at once.

Everything binds 127.0.0.1: run inside ``unshare -n`` next to kefu in media mode ``ai`` with
``KEFU_WEBRTC_ICE_HOST_ADDRESSES=127.0.0.1`` (docs/BENCHMARKS.md "AI voice loop" shows the
start-up). The agent's token is minted with kefu's own secret (``--config`` / ``KEFU_*``
environment, as ``kefu token``) unless ``--token`` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import functools
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from loadtest.voice import (
    ASR_RATE,
    BARGE_LONG,
    BARGE_SECOND,
    FRAME_S,
    SIP_RATE,
    VOICED_RMS,
    Heard,
    Placed,
    Question,
    Script,
    build_script,
)

Frame = tuple[float, float]
"""(arrival, UNIX seconds; RMS of the decoded 20 ms frame)."""

CALLER_THANKS = "Thank you Maria, that is very helpful."
AGENT_LINE = "Hello, this is Maria from the service team. I am taking over your call now."
LEAD_S = 5.0
"""Silence before Q1: kefu's greeting plays meanwhile."""
THANKS_AT_S = 13.5
Q2_AT_S = 21.5
SCRIPT_TAIL_S = 9.0
AGENT_LEAD_S = 0.2
"""Digital silence before the agent's words: nothing voiced leaves the agent's microphone in
its first 10 frames, so no bot frame that arrives then can pass for the agent's."""
AGENT_LISTEN_S = 3.5
"""Silence after the agent's words (the caller thanks them meanwhile)."""
HANDBACK_TAIL_S = 1.0
CUT_IN_S = 0.8
"""Seconds from the agent hearing the bot's answer begin to the click (the room hears the
bot ~0.2 s after the caller does): about 1 s into the answer at the caller."""
ANSWER_HEARD_S = 15.0
STAGGER_S = 1.0
TARGET_MS = 100.0
AUDIBLE_RMS = 30.0
"""A kefu -> caller frame above this RMS (about -61 dBFS) is not digital silence: the bot's
last audible frame (the codec's fade-out included) is reported next to its last voiced one."""
HEARD_RMS = VOICED_RMS / 2
"""A frame the agent received counts as carrying the caller's voice above this RMS (Opus
smears the edges of words)."""
REPEAT_SIMILARITY = 0.8
"""Correlation above which the bot audio after the click replays what was heard before."""
MATCH_TOL_S = 0.04
MAX_LAG_S = 1.0
ALIGN_TOL_FRAMES = 2
FOREIGN_TOL_FRAMES = 5
FIND_CALL_S = 20.0
QUESTION_EVENT_S = 30.0
CPU_SAMPLE_S = 0.25

HEADER = (
    "| K agents × rounds | takeovers ok | click → last bot packet p50 / p95 / max ms | "
    "click → agent audio p50 / p95 / max ms | takeover API p50 / p95 / max ms | "
    "next answer p50 / p95 / max ms | caller frames lost (agent) | ≤ 100 ms | "
    "kefu CPU % (all held) | load |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


# --- the pure part: frames in, numbers out ----------------------------------------------------


def rms(pcm: np.ndarray) -> float:
    return float(np.sqrt(np.mean(pcm.astype(np.float64) ** 2))) if pcm.size else 0.0


def voiced_flags(pcm: np.ndarray, frame: int, threshold: float = VOICED_RMS) -> list[bool]:
    """Per ``frame``-sample frame of ``pcm`` (the last one zero-padded): RMS ≥ threshold."""
    n = -(-len(pcm) // frame)
    padded = np.zeros(n * frame, np.float64)
    padded[: len(pcm)] = pcm
    levels = np.sqrt((padded.reshape(n, frame) ** 2).mean(axis=1)) if n else np.zeros(0)
    return [bool(x >= threshold) for x in levels]


def stats(values: Sequence[float | None]) -> dict[str, Any]:
    """p50 / p95 / max of the values that exist, and how many there were."""
    xs = [float(v) for v in values if v is not None]
    if not xs:
        return {"p50": None, "p95": None, "max": None, "n": 0}
    return {
        "p50": round(float(np.percentile(xs, 50)), 1),
        "p95": round(float(np.percentile(xs, 95)), 1),
        "max": round(max(xs), 1),
        "n": len(xs),
    }


def ms(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round((later - earlier) * 1000, 1)


@dataclass(frozen=True, slots=True)
class Split:
    """The caller's received voiced frames around a takeover, told apart (bot / agent)."""

    bot: list[float]
    """Arrivals of the bot's voiced frames (the answer's start up to the first agent frame)."""
    agent: list[float]
    """Arrivals of the voiced frames that line up with the agent's WAV."""
    foreign: list[float]
    """Voiced frames after the first agent frame that do not line up with the WAV."""
    delay_s: float | None
    """Agent microphone → caller delay that lines the most frames up (None: no agent voice)."""

    @property
    def last_bot(self) -> float | None:
        return max(self.bot) if self.bot else None

    @property
    def first_agent(self) -> float | None:
        return min(self.agent) if self.agent else None


def split_bot_agent(
    received: Sequence[Frame],
    *,
    answer_start: float,
    mic_first_frame: float,
    wav_voiced: Sequence[bool],
    until: float,
    frame_s: float = FRAME_S,
    max_delay_s: float = MAX_LAG_S,
    tol_frames: int = ALIGN_TOL_FRAMES,
    foreign_tol_frames: int = FOREIGN_TOL_FRAMES,
    threshold: float = VOICED_RMS,
) -> Split:
    """Which voiced frames the caller received between ``answer_start`` and ``until`` were
    the bot's and which the agent's.

    The agent's WAV frame ``j`` left its microphone at ``mic_first_frame + j * frame_s``.
    Every delay from 0 to ``max_delay_s`` (5 ms steps) is tried: the one under which most
    received voiced frames (from the WAV's first voiced frame on) fall on a voiced WAV frame
    is the agent's path delay (ties: the shortest). Under it, a received voiced frame is the
    agent's when a WAV frame within ``tol_frames`` of it is voiced. Voiced frames before the
    first agent frame are the bot's; later ones with no voiced WAV frame within
    ``foreign_tol_frames`` are ``foreign`` (the wider margin allows for the agent's audio
    drifting by a few frames on its way: rebuffering, a sender that skips frames).
    """
    voiced = sorted(at for at, level in received if level >= threshold and at >= answer_start)
    voiced = [at for at in voiced if at < until]
    onset_index = next((j for j, v in enumerate(wav_voiced) if v), None)
    if onset_index is None:
        return Split(voiced, [], [], None)
    onset = mic_first_frame + onset_index * frame_s
    after = [at for at in voiced if at >= onset]
    n = len(wav_voiced)

    def index(at: float, delay: float) -> int:
        return int(np.floor((at - delay - mic_first_frame) / frame_s + 1e-9))

    best, best_score = None, 0
    for step in range(int(round(max_delay_s / 0.005)) + 1):
        delay = step * 0.005
        score = 0
        for at in after:
            j = index(at, delay)
            score += 0 <= j < n and wav_voiced[j]
        if score > best_score:
            best, best_score = delay, score
    if best is None:
        return Split(voiced, [], [], None)

    def lines_up(at: float, tol: int) -> bool:
        j = index(at, best)
        lo, hi = max(0, j - tol), min(n, j + tol + 1)
        return any(wav_voiced[lo:hi])

    agent = [at for at in after if lines_up(at, tol_frames)]
    first = min(agent) if agent else until
    bot = [at for at in voiced if at < first]
    foreign = [at for at in voiced if at > first and not lines_up(at, foreign_tol_frames)]
    return Split(bot, agent, foreign, best)


def last_audible(
    received: Sequence[Frame], start: float, until: float, threshold: float = AUDIBLE_RMS
) -> float | None:
    """Arrival of the last frame in [start, until) louder than digital silence."""
    found = [at for at, level in received if start <= at < until and level >= threshold]
    return max(found) if found else None


def find_repeat(
    pcm: np.ndarray, start: int, length: int, *, search: int, min_gap: int = 80
) -> tuple[float, int] | None:
    """Whether ``pcm[start:start + length]`` repeats audio that played shortly before it:
    the best normalised correlation with any stretch starting in the ``search`` samples
    before it (and at least ``min_gap`` samples earlier), and how many samples earlier that
    stretch started. None for a silent or too short segment."""
    seg = pcm[start : start + length].astype(np.float64)
    lo = max(0, start - search)
    hi = start - min_gap  # last candidate start
    norm = float(np.linalg.norm(seg))
    if len(seg) < min_gap or norm == 0 or hi < lo:
        return None
    window = pcm[lo : hi + length].astype(np.float64)
    dots = np.correlate(window, seg, mode="valid")
    energy = np.concatenate(([0.0], np.cumsum(window**2)))
    norms = np.sqrt(energy[length:] - energy[:-length])
    scores = dots / (norms * norm + 1e-9)
    best = int(np.argmax(scores))
    return float(scores[best]), start - (lo + best)


def repeat_after(
    back_audio: Sequence[tuple[float, np.ndarray]], click: float, last_bot: float | None
) -> dict[str, Any] | None:
    """The bot's audio the caller got after the click (up to its last voiced packet): is it
    a replay of what the caller had already heard in the second before? ``similarity`` ≥ 0.8
    says it is (``earlier_ms``: how much earlier it had played)."""
    if last_bot is None or last_bot < click:
        return None
    after = [i for i, (at, _) in enumerate(back_audio) if click <= at <= last_bot]
    if len(after) < 2:
        return None
    pcm = np.concatenate([chunk for _, chunk in back_audio])
    offsets = np.cumsum([0] + [len(chunk) for _, chunk in back_audio])
    start, end = int(offsets[after[0]]), int(offsets[after[-1] + 1])
    found = find_repeat(pcm, start, end - start, search=SIP_RATE)
    if found is None:
        return None
    score, earlier = found
    return {"similarity": round(score, 3), "earlier_ms": round(earlier * 1000 / SIP_RATE, 1)}


def estimate_lag(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    max_lag_s: float = MAX_LAG_S,
    bin_s: float = 0.01,
    sent_threshold: float = VOICED_RMS,
    heard_threshold: float = HEARD_RMS,
) -> tuple[float | None, int]:
    """The delay (0 … ``max_lag_s``) from ``sent`` to ``heard`` under which their voiced
    frames line up best, on a ``bin_s`` grid (a heard frame counts in its bin and both
    neighbours, against jitter), and the score: the number of sent voiced frames that line up.
    The middle of the best plateau; None (0) when nothing lines up."""
    s = [at for at, level in sent if level >= sent_threshold]
    h = [at for at, level in heard if level >= heard_threshold]
    if not s or not h:
        return None, 0
    t0 = min(min(s), min(h))
    heard_bins: set[int] = set()
    for at in h:
        b = int(round((at - t0) / bin_s))
        heard_bins.update((b - 1, b, b + 1))
    sent_bins = [int(round((at - t0) / bin_s)) for at in s]
    scores = [
        sum((b + lag) in heard_bins for b in sent_bins)
        for lag in range(int(round(max_lag_s / bin_s)) + 1)
    ]
    top = max(scores)
    if top == 0:
        return None, 0
    plateau = [lag for lag, score in enumerate(scores) if score == top]
    # the first run of the best score
    run = [plateau[0]]
    for lag in plateau[1:]:
        if lag != run[-1] + 1:
            break
        run.append(lag)
    return run[len(run) // 2] * bin_s, top


@dataclass(frozen=True, slots=True)
class FrameMatch:
    sent_voiced: int
    heard: int
    missing: list[float] = field(default_factory=list)
    """Arrivals at kefu of the sent voiced frames the agent did not hear."""

    @property
    def lost(self) -> int:
        return self.sent_voiced - self.heard


def match_frames(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    lag_s: float,
    window: tuple[float, float],
    tol_s: float = MATCH_TOL_S,
    sent_threshold: float = VOICED_RMS,
    heard_threshold: float = HEARD_RMS,
) -> FrameMatch:
    """The sent voiced frames that arrived within ``window`` and how many of them were heard:
    a heard frame (RMS ≥ ``heard_threshold``) within ``tol_s`` of arrival + ``lag_s``, the
    nearest unused one, each heard frame used once. Matched in two passes, 10 ms first, so a
    missing frame's neighbours are not taken from the frames they belong to."""
    a, b = window
    s = sorted(at for at, level in sent if level >= sent_threshold and a <= at < b)
    h = sorted(at for at, level in heard if level >= heard_threshold)
    used = [False] * len(h)
    matched = [False] * len(s)
    for tol in sorted({min(0.01, tol_s), tol_s}):
        for i, at in enumerate(s):
            if matched[i]:
                continue
            want = at + lag_s
            k = bisect.bisect_left(h, want - tol)
            best = None
            while k < len(h) and h[k] <= want + tol:
                if not used[k] and (best is None or abs(h[k] - want) < abs(h[best] - want)):
                    best = k
                k += 1
            if best is not None:
                used[best] = matched[i] = True
    missing = [at for at, ok in zip(s, matched, strict=True) if not ok]
    return FrameMatch(len(s), sum(matched), missing)


def best_match(
    sent: Sequence[Frame],
    heard: Sequence[Frame],
    *,
    lag_s: float,
    window: tuple[float, float],
    search_s: float = 0.02,
    step_s: float = 0.002,
) -> tuple[float, FrameMatch]:
    """:func:`match_frames` under the delay within ``search_s`` of ``lag_s`` (``step_s``
    apart) that matches the most frames (ties: the nearest to ``lag_s``). The envelope's
    delay is good to a bin; the agent's 20 ms frames do not start where the caller's packets
    do, and half a frame off would miss a word's first frame and leave its smeared last one
    unused."""
    steps = int(round(search_s / step_s))
    candidates = sorted(
        (lag_s + k * step_s for k in range(-steps, steps + 1)), key=lambda x: abs(x - lag_s)
    )
    best_lag, best = lag_s, match_frames(sent, heard, lag_s=lag_s, window=window)
    for lag in candidates:
        m = match_frames(sent, heard, lag_s=lag, window=window)
        if m.heard > best.heard:
            best_lag, best = lag, m
    return best_lag, best


def pick_track(
    sent: Sequence[Frame], tracks: Sequence[Sequence[Frame]]
) -> tuple[int | None, float | None]:
    """The received track that carries the caller (its voiced frames line up best with what
    the caller sent) and its delay; (None, None) when none does."""
    best: tuple[int | None, float | None, int] = (None, None, 0)
    for i, frames in enumerate(tracks):
        lag, score = estimate_lag(sent, frames)
        if lag is not None and score > best[2]:
            best = (i, lag, score)
    return best[0], best[1]


_FROM_PORT = re.compile(r"@[^:;>]+:(\d+)")


def from_port(uri: Any) -> int | None:
    """The port of a SIP URI's host part (``sip:sipp@127.0.0.1:6012`` → 6012)."""
    found = _FROM_PORT.search(str(uri or ""))
    return int(found.group(1)) if found else None


def words(text: str) -> list[str]:
    return re.sub(r"[^\w\s']", " ", text.lower()).split()


def word_recall(ref: str, hyp: str | None) -> float | None:
    """Share of the reference's words that the hypothesis has (each used once)."""
    if hyp is None:
        return None
    want = words(ref)
    have = words(hyp)
    hit = 0
    for w in want:
        if w in have:
            have.remove(w)
            hit += 1
    return round(hit / len(want), 2) if want else None


def timestamp_skips(
    packets: Sequence[tuple[float, int]], step: int = 160
) -> list[tuple[float, int]]:
    """(arrival, frames skipped) for each packet whose RTP timestamp jumped more than one
    ``step`` past the previous one's, packets being (arrival, timestamp) of one SSRC in
    arrival order: audio the sender dropped to catch up, with no sequence gap to show it."""
    out = []
    for (_, prev), (at, ts) in zip(packets, packets[1:], strict=False):
        delta = (ts - prev) & 0xFFFFFFFF
        if step < delta < 0x80000000:
            out.append((at, delta // step - 1))
    return out


def cpu_span(samples: Sequence[tuple[float, float]]) -> float | None:
    """% of one core used from the first sample to the last."""
    if len(samples) < 2:
        return None
    return cpu_between(samples, samples[0][0], samples[-1][0])


def cpu_between(samples: Sequence[tuple[float, float]], a: float, b: float) -> float | None:
    """% of one core used between UNIX times ``a`` and ``b``, from (time, cumulative CPU s)
    samples: the last sample at or before ``a`` to the first at or after ``b``."""
    before = [s for s in samples if s[0] <= a]
    after = [s for s in samples if s[0] >= b]
    if not before or not after:
        return None
    (t0, c0), (t1, c1) = before[-1], after[0]
    return round(100.0 * (c1 - c0) / (t1 - t0), 1) if t1 > t0 else None


# --- one takeover, from the capture and the agent's marks --------------------------------------


@dataclass
class CallWire:
    """One caller as the capture saw it."""

    heard: Heard
    """Script, speech marks on the wire, and the kefu → caller frames (all SSRCs)."""
    sent: list[Frame]
    """Caller → kefu audio packets."""
    sent_arrivals: list[float]
    stream: dict[str, Any]
    """Sequence accounting of the caller → kefu stream (``rtpcap`` stats)."""
    back_ssrcs: int
    back_audio: list[tuple[float, np.ndarray]] = field(default_factory=list)
    back_skips: list[tuple[float, int]] = field(default_factory=list)
    """(arrival, frames) where kefu's RTP timestamp to the caller jumped (frames skipped)."""
    back_seq_lost: int = 0
    """(arrival, decoded 8 kHz PCM) of every kefu → caller audio packet, in arrival order."""


def takeover_record(
    wire: CallWire,
    agent: dict[str, Any],
    *,
    wav_voiced: Sequence[bool],
    tracks: Sequence[Sequence[Frame]],
    kefu_rtp: dict[str, Any] | None,
    transcripts: dict[str, str | None],
) -> dict[str, Any]:
    """Every measure of one takeover (see the module's doc)."""
    h = wire.heard
    rec: dict[str, Any] = {"ok": bool(agent.get("ok")) and h.ok, "call_id": agent.get("call_id")}
    if not h.ok:
        rec["error"] = h.error
    if not agent.get("ok"):
        rec["error"] = agent.get("error")
    marks = {
        k: agent.get(k)
        for k in (
            "t_click",
            "t_ack",
            "t_first_agent_frame",
            "agent_audio_start",
            "t_handback_click",
            "t_handback_ack",
        )
    }
    rec.update(marks)
    rec["takeover_api_ms"] = agent.get("takeover_api_ms")
    rec["handback_api_ms"] = agent.get("handback_api_ms")
    rec["state_human_active_after_click_ms"] = agent.get("state_human_active_after_click_ms")
    click, ack, first = marks["t_click"], marks["t_ack"], marks["t_first_agent_frame"]
    back_click, back_ack = marks["t_handback_click"], marks["t_handback_ack"]
    q1_end = h.speech_ends[0]
    answer = h.first_voiced_after(q1_end) if q1_end is not None else None
    rec["answer_start"] = answer
    rec["click_into_answer_ms"] = ms(click, answer)
    rec["agent_heard_answer_ms"] = ms(agent.get("bot_heard_at"), answer)
    if click is not None and first is not None and answer is not None:
        until = back_click if back_click is not None else float("inf")
        split = split_bot_agent(
            h.frames, answer_start=answer, mic_first_frame=first, wav_voiced=wav_voiced, until=until
        )
        onset_index = next((j for j, v in enumerate(wav_voiced) if v), 0)
        onset = first + onset_index * FRAME_S
        rec["agent_voice_sent"] = round(onset, 4)
        rec["bot_talking_at_click"] = any(click - 0.2 <= at < click for at in split.bot)
        rec["last_bot_packet"] = split.last_bot
        rec["first_agent_packet"] = split.first_agent
        rec["bot_stop_ms"] = ms(split.last_bot, click)
        rec["bot_last_audible_ms"] = ms(
            last_audible(h.frames, answer, split.first_agent or until), click
        )
        path = ms(split.first_agent, onset)
        rec["agent_path_ms"] = path
        # click -> the mic's first WAV frame, then that WAV's voice -> the caller
        rec["first_agent_audio_ms"] = (
            None if path is None else round((first - click) * 1000 + path, 1)
        )
        rec["agent_delay_fit_ms"] = ms(split.delay_s, 0.0) if split.delay_s is not None else None
        rec["bot_frames_after_click"] = sum(at >= click for at in split.bot)
        rec["bot_after_click_repeat"] = repeat_after(wire.back_audio, click, split.last_bot)
        rec["agent_voiced_frames"] = len(split.agent)
        rec["foreign_voiced_frames"] = len(split.foreign)
        rec["meets_100ms"] = bool(
            rec["bot_talking_at_click"]
            and rec["bot_stop_ms"] is not None
            and rec["bot_stop_ms"] <= TARGET_MS
            and not split.foreign
        )
    else:
        rec["meets_100ms"] = False
    # after the hand-back
    q2_start = h.speech_starts[2] if len(h.speech_starts) > 2 else None
    q2_end = h.speech_ends[2] if len(h.speech_ends) > 2 else None
    rec["q2_after_handback"] = False
    if back_ack is not None and q2_start is not None and q2_start > back_ack:
        rec["q2_after_handback"] = True
    if back_ack is not None and q2_start is not None and q2_end is not None and q2_start > back_ack:
        nxt = h.first_voiced_after(q2_end)
        rec["ai_spoke_before_q2"] = h.voiced_within(back_ack, q2_start)
        rec["next_answer_latency_ms"] = ms(nxt, q2_end)
        rec["handback_to_answer_ms"] = ms(nxt, back_click)
    # what kefu sent the caller
    held = (ack, back_click) if ack is not None and back_click is not None else (0.0, 0.0)
    rec["downlink"] = {
        "packets": len(h.frames),
        "ssrcs": wire.back_ssrcs,
        "seq_lost": wire.back_seq_lost,
        "skipped_frames": sum(n for _, n in wire.back_skips),
        "skipped_in_takeover": sum(n for at, n in wire.back_skips if held[0] <= at < held[1]),
    }
    # the caller's frames
    caller: dict[str, Any] = {"packets_sent": len(wire.sent), **wire.stream}
    if ack is not None and back_click is not None:
        track, lag = pick_track(wire.sent, tracks)
        if track is not None:
            # the delay inside the takeover (it may have drifted since the call began)
            inside = [f for f in wire.sent if ack <= f[0] < back_click]
            local, _ = estimate_lag(inside, tracks[track])
            lag = local if local is not None else lag
        caller["agent_track"] = track
        caller["lag_ms"] = ms(lag, 0.0) if lag is not None else None
        caller["window_s"] = round(back_click - ack, 2)
        caller["packets_in_window"] = sum(ack <= at < back_click for at in wire.sent_arrivals)
        if track is not None and lag is not None:
            lag, m = best_match(wire.sent, tracks[track], lag_s=lag, window=(ack, back_click))
            caller["lag_ms"] = ms(lag, 0.0)
            caller.update(voiced_sent=m.sent_voiced, heard_by_agent=m.heard, lost=m.lost)
            caller["missing_at"] = [round(x, 3) for x in m.missing[:20]]
        else:
            voiced = sum(ack <= at < back_click and level >= VOICED_RMS for at, level in wire.sent)
            caller.update(voiced_sent=voiced, heard_by_agent=0, lost=voiced)
    if kefu_rtp is not None:
        sent_by = sum(at <= kefu_rtp["asked"] for at in wire.sent_arrivals)
        received = kefu_rtp.get("received")
        caller["kefu_rtp"] = {
            "received": received,
            "lost": kefu_rtp.get("lost"),
            "sent_before_asked": sent_by,
            "not_received": max(0, sent_by - received) if isinstance(received, int) else None,
        }
    rec["caller_frames"] = caller
    rec["asr"] = {
        "thanks": transcripts.get("thanks"),
        "thanks_recall": word_recall(CALLER_THANKS, transcripts.get("thanks")),
        "q2": transcripts.get("q2"),
        "q2_recall": word_recall(BARGE_SECOND, transcripts.get("q2")),
    }
    rec["agent_errors"] = agent.get("errors") or []
    return rec


def caller_transcripts(events: Sequence[dict[str, Any]]) -> dict[str, str | None]:
    """The caller's ``transcript.final`` lines by turn: 1 Q1, 2 the thanks, 3 Q2 (None if
    ASR never finalised that turn)."""
    by_turn = {
        int(e.get("turn_id") or 0): str(e.get("text") or "")
        for e in events
        if e.get("type") == "transcript.final" and e.get("speaker") == "caller"
    }
    return {"q1": by_turn.get(1), "thanks": by_turn.get(2), "q2": by_turn.get(3)}


def summarize(
    records: Sequence[dict[str, Any]], rounds: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """The percentiles and totals over every takeover (``records``) and round."""
    measured = [r for r in records if r.get("bot_stop_ms") is not None]
    out: dict[str, Any] = {
        "takeovers": len(records),
        "ok": sum(bool(r.get("ok")) for r in records),
        "measured": len(measured),
        "meets_100ms": sum(bool(r.get("meets_100ms")) for r in records),
        "all_meet_100ms": bool(records) and all(r.get("meets_100ms") for r in records),
        "bot_talking_at_click": sum(bool(r.get("bot_talking_at_click")) for r in records),
    }
    for key in (
        "bot_stop_ms",
        "bot_last_audible_ms",
        "first_agent_audio_ms",
        "agent_path_ms",
        "takeover_api_ms",
        "handback_api_ms",
        "state_human_active_after_click_ms",
        "click_into_answer_ms",
        "agent_heard_answer_ms",
        "next_answer_latency_ms",
        "handback_to_answer_ms",
    ):
        out[key] = stats([r.get(key) for r in records])
    frames = [r.get("caller_frames") or {} for r in records]
    out["caller_frames"] = {
        "wire_packets": sum(int(f.get("packets_sent") or 0) for f in frames),
        "wire_seq_lost": sum(int(f.get("lost_on_wire") or 0) for f in frames),
        "voiced_sent_in_takeover": sum(int(f.get("voiced_sent") or 0) for f in frames),
        "heard_by_agent": sum(int(f.get("heard_by_agent") or 0) for f in frames),
        "lost_to_agent": sum(int(f.get("lost") or 0) for f in frames),
        "lost_to_agent_max": max((int(f.get("lost") or 0) for f in frames), default=0),
        "agent_lag_ms": stats([f.get("lag_ms") for f in frames]),
        "kefu_rtp_lost": sum(int((f.get("kefu_rtp") or {}).get("lost") or 0) for f in frames),
        "kefu_not_received": sum(
            int((f.get("kefu_rtp") or {}).get("not_received") or 0) for f in frames
        ),
    }
    down = [r.get("downlink") or {} for r in records]
    out["downlink_skipped_frames"] = sum(int(d.get("skipped_frames") or 0) for d in down)
    out["downlink_skipped_in_takeover"] = sum(int(d.get("skipped_in_takeover") or 0) for d in down)
    out["foreign_voiced_frames"] = sum(int(r.get("foreign_voiced_frames") or 0) for r in records)
    out["bot_replayed_after_click"] = sum(
        ((r.get("bot_after_click_repeat") or {}).get("similarity") or 0) >= REPEAT_SIMILARITY
        for r in records
    )
    out["ai_spoke_before_q2"] = sum(bool(r.get("ai_spoke_before_q2")) for r in records)
    out["q2_after_handback"] = sum(bool(r.get("q2_after_handback")) for r in records)
    asr = [r.get("asr") or {} for r in records]
    out["asr_recall"] = {
        "thanks": stats([a.get("thanks_recall") for a in asr]),
        "q2": stats([a.get("q2_recall") for a in asr]),
    }
    out["kefu_cpu_pct"] = {
        "round": stats([r.get("kefu_cpu_pct") for r in rounds]),
        "all_held": stats([r.get("kefu_cpu_all_held_pct") for r in rounds]),
    }
    out["bench_cpu_pct"] = stats([r.get("bench_cpu_pct") for r in rounds])
    out["ai_only_answer_ms"] = stats([x for r in rounds for x in r.get("ai_only_answer_ms", [])])
    return out


def _triple(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return "–"
    return f"{s['p50']:.0f} / {s['p95']:.0f} / {s['max']:.0f}"


def table_row(summary: dict[str, Any]) -> str:
    s = summary
    cf = s["caller_frames"]
    cpu = s["kefu_cpu_pct"]["all_held"]
    cpu_text = f"{cpu['p50']:.0f}" if cpu.get("n") else "–"
    load = s.get("load") or {}
    return (
        f"| {s.get('concurrent_agents')} × {s.get('rounds')} | {s['ok']}/{s['takeovers']} | "
        f"{_triple(s['bot_stop_ms'])} | {_triple(s['first_agent_audio_ms'])} | "
        f"{_triple(s['takeover_api_ms'])} | {_triple(s['next_answer_latency_ms'])} | "
        f"{cf['lost_to_agent']} of {cf['voiced_sent_in_takeover']} | "
        f"{s['meets_100ms']}/{s['takeovers']} | {cpu_text} | "
        f"{load.get('start', ['?'])[0]} → {load.get('end', ['?'])[0]} |"
    )


# --- the live part --------------------------------------------------------------------------


@dataclass
class Settings:
    target_sip: str
    target_http: str
    cycles: int = 5
    agents: int = 1
    ai_calls: int = 0
    stagger_s: float = STAGGER_S
    cut_in_s: float = CUT_IN_S
    kefu_pid: int | None = None
    token: str | None = None
    config_path: str | None = None
    keep: Path | None = None


@functools.cache
def timed_client_class() -> type:
    """:class:`loadtest.webrtc_client.WebRtcClient` that also keeps, per received track, every
    frame's arrival (UNIX time) and RMS (aiortc is imported only when a round runs)."""
    from loadtest.webrtc_client import WebRtcClient

    class TimedClient(WebRtcClient):
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.timed: list[list[Frame]] = []
            self._frames_of: dict[int, list[Frame]] = {}

        def _on_frame(self, track: Any, pcm: np.ndarray) -> None:
            frames = self._frames_of.get(id(track))
            if frames is None:
                frames = self._frames_of[id(track)] = []
                self.timed.append(frames)
            if len(frames) < self._max_frames:
                frames.append((time.time(), rms(pcm)))

    return TimedClient


def timed_media(pcm: np.ndarray) -> Any:
    """:class:`loadtest.agent_client.RtcMedia` whose client is a :func:`timed_client_class`."""
    from loadtest.agent_client import RtcMedia, agent_mic_class
    from loadtest.webrtc_client import RATE

    media = RtcMedia.__new__(RtcMedia)
    media.mic = agent_mic_class()(pcm)
    media.client = timed_client_class()(mic=media.mic, max_record_s=len(pcm) / RATE + 120.0)
    media.wav_seconds = len(pcm) / RATE
    return media


def caller_script(voice: object) -> Script:
    from kefu.ai_bridge.listen.heldout import speak

    def ask(text: str) -> Question:
        return Question(text[:20], speak(voice, text, noise_scale=0, noise_w_scale=0), text)

    return build_script(
        [ask(BARGE_LONG), ask(CALLER_THANKS), ask(BARGE_SECOND)],
        at=[LEAD_S, THANKS_AT_S, Q2_AT_S],
        tail_s=SCRIPT_TAIL_S,
    )


def agent_wav(voice: object, path: Path) -> list[bool]:
    """Write the agent's WAV (16 kHz); returns its voiced flags per 20 ms frame as the
    agent's microphone sends it (48 kHz frames of the resampled WAV)."""
    from kefu.ai_bridge.listen.heldout import speak, write_wav
    from loadtest.webrtc_client import FRAME, read_wav

    line = speak(voice, AGENT_LINE, noise_scale=0, noise_w_scale=0)
    lead = np.zeros(int(AGENT_LEAD_S * ASR_RATE), np.int16)
    tail = np.zeros(int(AGENT_LISTEN_S * ASR_RATE), np.int16)
    write_wav(path, np.concatenate([lead, line, tail]))
    return voiced_flags(read_wav(path), FRAME)


def wire_of(script: Script, streams: Any, media_port: int) -> CallWire:
    """What the capture says about one caller (``media_port``: SIPp's ``-mp``)."""
    from loadtest.pcap import g711_decode
    from loadtest.rtpcap import RtpStream, StreamKey, find_stream
    from loadtest.voice import _arrival_at

    n = len(script.placed)
    h = Heard(script, [None] * n, [None] * n)
    try:
        sent = find_stream(streams, src_port=media_port)
    except LookupError as exc:
        h.ok, h.error = False, str(exc)
        return CallWire(h, [], [], {}, 0)
    # kefu -> caller: every SSRC (the switch to the room's mix must not hide a stream)
    backs = [s for k, s in streams.items() if k.dst[1] == media_port]
    packets = sorted((p for s in backs for p in s.packets), key=lambda p: p.arrival)
    back = RtpStream(StreamKey(("", 0), ("", media_port), 0), packets)
    audio = [p for p in sent.packets if p.payload_type in (0, 8)]
    base = audio[0].timestamp if audio else 0
    offsets = [((p.timestamp - base) & 0xFFFFFFFF) / SIP_RATE for p in audio]
    placed: Sequence[Placed] = script.placed
    for k, pl in enumerate(placed):
        h.speech_ends[k] = _arrival_at(audio, offsets, pl.speech_end_s - FRAME_S)
        h.speech_starts[k] = _arrival_at(audio, offsets, pl.speech_start_s)
    h.frames = [
        (p.arrival, rms(g711_decode(p.payload, p.payload_type)))
        for p in back.packets
        if p.payload_type in (0, 8)
    ]
    st = sent.stats()
    stream = {
        "lost_on_wire": st.lost,
        "duplicates": st.duplicates,
        "reordered": st.reordered,
        "expected": st.expected,
    }
    frames = [(p.arrival, rms(g711_decode(p.payload, p.payload_type))) for p in audio]
    back_audio = [
        (p.arrival, g711_decode(p.payload, p.payload_type))
        for p in back.packets
        if p.payload_type in (0, 8)
    ]
    skips = [
        skip
        for b in backs
        for skip in timestamp_skips(
            [(p.arrival, p.timestamp) for p in b.packets if p.payload_type in (0, 8)]
        )
    ]
    return CallWire(
        h,
        frames,
        [p.arrival for p in audio],
        stream,
        len(backs),
        back_audio,
        sorted(skips),
        sum(b.stats().lost for b in backs),
    )


class CpuSampler:
    """Cumulative CPU seconds of kefu's process tree and of this process, every 0.25 s."""

    def __init__(self, kefu_pid: int | None) -> None:
        self.kefu_pid = kefu_pid
        self.kefu: list[tuple[float, float]] = []
        self.own: list[tuple[float, float]] = []
        self._task: asyncio.Task[None] | None = None

    def sample(self) -> None:
        from loadtest.kefu_process import cpu_seconds, process_tree

        now = time.time()
        own = os.times()
        self.own.append((now, own.user + own.system))
        if self.kefu_pid is None:
            return
        total = 0.0
        for pid in process_tree(self.kefu_pid):
            try:
                total += cpu_seconds(pid)
            except OSError:
                continue
        self.kefu.append((now, total))

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(CPU_SAMPLE_S)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def stop(self) -> None:
        self.sample()
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


@dataclass
class AgentRun:
    """What one agent did: ``run_agent``'s summary, its tracks, kefu's RTP counters after."""

    index: int
    summary: dict[str, Any] = field(default_factory=dict)
    tracks: list[list[Frame]] = field(default_factory=list)
    kefu_rtp: dict[str, Any] | None = None
    bot_heard_at: float | None = None
    """When the agent first heard the bot's answer (the click is ``--cut-in`` s later)."""
    events: Any = None


async def _find_call(api: Any, port: int, within_s: float) -> str:
    from loadtest.agent_client import LIVE_STATE, AgentError

    deadline = time.monotonic() + within_s
    while True:
        for c in await api.calls():
            if from_port(c.get("caller")) == port and c.get("state") == LIVE_STATE:
                return str(c["call_id"])
        if time.monotonic() > deadline:
            raise AgentError(
                "pick", "no_live_call", f"no {LIVE_STATE} call from SIP port {port} in {within_s} s"
            )
        await asyncio.sleep(0.1)


async def _wait_event(events: Any, pred: Any, within_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        for e in events.events:
            if pred(e):
                return dict(e)
        await asyncio.sleep(0.02)
    return None


def caller_track(tracks: Sequence[Sequence[Frame]]) -> tuple[int, float] | None:
    """Right after the caller's question was transcribed, the agent's track of the caller:
    the one whose last voiced frame is the latest (the question was the last thing said),
    and that frame's arrival. None with fewer than two tracks (the bot's is missing)."""
    if len(tracks) < 2:
        return None
    last = [max((at for at, lv in t if lv >= VOICED_RMS), default=-1.0) for t in tracks]
    i = int(np.argmax(last))
    return i, last[i]


def voiced_after(tracks: Sequence[Sequence[Frame]], skip: int, since: float) -> float | None:
    """The first voiced frame after ``since`` on any track but ``skip``."""
    found = [
        at
        for i, t in enumerate(tracks)
        if i != skip
        for at, lv in t
        if lv >= VOICED_RMS and at > since
    ]
    return min(found) if found else None


async def _wait_bot_heard(tracks: Sequence[Sequence[Frame]], within_s: float) -> float | None:
    """When the agent first heard the bot's answer (a voiced frame on a track other than the
    caller's, chosen when the wait begins), polled every 20 ms; None if not within_s."""
    picked = caller_track(tracks)
    if picked is None:
        return None
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        heard = voiced_after(tracks, *picked)
        if heard is not None:
            return heard
        await asyncio.sleep(0.02)
    return None


async def _agent(
    s: Settings, session: Any, run: AgentRun, port: int, token: str, wav: Path, workdir: Path
) -> None:
    from loadtest.agent_client import (
        AgentApi,
        AgentError,
        EventsWatch,
        Options,
        run_agent,
    )

    api = AgentApi(session, s.target_http, token)
    try:
        call_id = await _find_call(api, port, FIND_CALL_S)
    except AgentError as exc:
        run.summary = {"ok": False, "error": exc.info}
        return
    events = EventsWatch(session, s.target_http, token, call_id)
    await events.start()
    run.events = events

    media: list[Any] = []

    async def gate() -> None:
        asked = await _wait_event(
            events,
            lambda e: (
                e.get("type") == "transcript.final"
                and e.get("speaker") == "caller"
                and int(e.get("turn_id") or 0) >= 1
            ),
            QUESTION_EVENT_S,
        )
        if asked is None:
            raise AgentError("gate", "no_question", "the caller's question was never transcribed")
        tracks = media[0].client.timed if media else []
        heard = await _wait_bot_heard(tracks, ANSWER_HEARD_S)
        if heard is None:
            raise AgentError("gate", "no_answer", "the agent never heard the bot answer")
        run.bot_heard_at = heard
        await asyncio.sleep(s.cut_in_s)

    def factory(pcm: np.ndarray) -> Any:
        media.append(timed_media(pcm))
        return media[-1]

    opts = Options(
        target=s.target_http,
        wav=wav,
        record=workdir / f"agent{run.index:02d}.wav",
        call_id=call_id,
        listen_s=0.0,
        hand_back=True,
        token=token,
        tail_s=HANDBACK_TAIL_S,
    )
    run.summary = await run_agent(opts, media_factory=factory, before_takeover=gate)
    if media:
        run.tracks = [list(t) for t in media[0].client.timed]
    asked = time.time()
    try:
        calls = await api.calls()
    except AgentError:
        return
    for c in calls:
        if c.get("call_id") == call_id and isinstance(c.get("rtp"), dict):
            run.kefu_rtp = {"asked": asked, **c["rtp"]}


async def run_round(
    s: Settings, round_no: int, script: Script, wav: Path, wav_voiced: list[bool], workdir: Path
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """K callers with agents and M without, one capture; the takeover records and the
    round's own numbers."""
    import aiohttp

    from loadtest.agent_client import mint_agent_token
    from loadtest.kefu_process import load_average
    from loadtest.pcap import make_rtp_pcap
    from loadtest.peers import TsharkCapture, run_sipp, sipp_media_port, take_ports
    from loadtest.rtpcap import rtp_streams
    from loadtest.voice import _resample

    n = s.agents + s.ai_calls
    media_ports = [sipp_media_port() for _ in range(n)]
    sip_ports = [take_ports() for _ in range(n)]
    pcap = workdir / "caller.pcap"
    if not pcap.exists():
        make_rtp_pcap(pcap, _resample(script.pcm, ASR_RATE, SIP_RATE))
    tokens = [
        s.token or mint_agent_token(config_path=s.config_path, user=f"takeover-bench-{i}")
        for i in range(s.agents)
    ]
    capture_path = workdir / f"round{round_no:02d}.pcap"
    info: dict[str, Any] = {"round": round_no, "load_start": load_average()}
    cpu = CpuSampler(s.kefu_pid)
    runs = [AgentRun(i) for i in range(s.agents)]

    async def caller(i: int) -> Any:
        await asyncio.sleep(i * s.stagger_s)
        return await asyncio.to_thread(
            run_sipp,
            "uac_echo",
            s.target_sip,
            media_port=media_ports[i],
            local_port=sip_ports[i],
            keys={"pcap": pcap},
            variables={"audio_ms": int(script.seconds * 1000)},
            timeout=script.seconds + 25,
        )

    started = time.time()
    async with TsharkCapture(path=capture_path, ports=media_ports):
        cpu.start()
        async with aiohttp.ClientSession() as session:
            agents = [
                asyncio.create_task(
                    _agent(s, session, runs[i], sip_ports[i], tokens[i], wav, workdir)
                )
                for i in range(s.agents)
            ]
            sipps = await asyncio.gather(*(caller(i) for i in range(n)))
            await asyncio.gather(*agents)
            for r in runs:
                if r.events is not None:
                    await r.events.close()
        await cpu.stop()
    ended = time.time()
    info["load_end"] = load_average()
    streams = rtp_streams(capture_path, ports=media_ports)
    records = []
    for i in range(n):
        wire = wire_of(script, streams, media_ports[i])
        res = sipps[i]
        if not res.ok:
            wire.heard.ok = False
            wire.heard.error = (res.errors or res.stderr_tail)[-800:] or "SIPp failed"
        if i >= s.agents:
            h = wire.heard
            q1 = h.speech_ends[0]
            info.setdefault("ai_only_answer_ms", []).append(
                ms(h.first_voiced_after(q1), q1) if q1 is not None else None
            )
            continue
        r = runs[i]
        rec = takeover_record(
            wire,
            {**r.summary, "bot_heard_at": r.bot_heard_at},
            wav_voiced=wav_voiced,
            tracks=r.tracks,
            kefu_rtp=r.kefu_rtp,
            transcripts=caller_transcripts(r.events.events if r.events else []),
        )
        rec.update(round=round_no, caller=i, back_ssrcs=wire.back_ssrcs)
        records.append(rec)
        if s.keep:
            frames_json = {
                "record": rec,
                "caller_sent": wire.sent,
                "caller_received": wire.heard.frames,
                "agent_tracks": r.tracks,
            }
            dump = workdir / f"round{round_no:02d}-call{i:02d}-frames.json"
            dump.write_text(json.dumps(frames_json, default=str) + "\n")
    info["seconds"] = round(ended - started, 1)
    info["bench_cpu_pct"] = cpu_span(cpu.own)
    if s.kefu_pid is not None:
        info["kefu_cpu_pct"] = cpu_span(cpu.kefu)
        acks = [float(r["t_ack"]) for r in records if r.get("t_ack")]
        backs = [float(r["t_handback_click"]) for r in records if r.get("t_handback_click")]
        if records and len(acks) == len(backs) == len(records):
            a, b = max(acks), min(backs)
            info["all_held_s"] = round(b - a, 2) if b > a else 0.0
            if b - a >= 1.0:
                info["kefu_cpu_all_held_pct"] = cpu_between(cpu.kefu, a, b)
    if not s.keep:
        capture_path.unlink(missing_ok=True)
    return records, info


def run(s: Settings) -> dict[str, Any]:
    from kefu.ai_bridge.listen.heldout import piper_voice
    from loadtest.kefu_process import load_average

    voice = piper_voice()
    script = caller_script(voice)
    workdir = Path(s.keep) if s.keep else Path(tempfile.mkdtemp(prefix="kefu-takeover-"))
    workdir.mkdir(parents=True, exist_ok=True)
    wav = workdir / "agent.wav"
    wav_voiced = agent_wav(voice, wav)
    load_start = load_average()
    records: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []
    started = time.time()
    try:
        for r in range(max(1, s.cycles)):
            recs, info = asyncio.run(run_round(s, r, script, wav, wav_voiced, workdir))
            records.extend(recs)
            rounds.append(info)
            sys.stderr.write(
                f"takeover: round {r + 1}/{s.cycles}: "
                + ", ".join(
                    f"stop {x.get('bot_stop_ms')} ms, agent {x.get('first_agent_audio_ms')} ms"
                    for x in recs
                )
                + "\n"
            )
    finally:
        if not s.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    summary: dict[str, Any] = {
        "target_sip": s.target_sip,
        "target_http": s.target_http,
        "rounds": max(1, s.cycles),
        "concurrent_agents": s.agents,
        "ai_calls": s.ai_calls,
        "cut_in_s": s.cut_in_s,
        "stagger_s": s.stagger_s,
        "kefu_pid": s.kefu_pid,
        "wall_s": round(time.time() - started, 1),
        "load": {"start": load_start, "end": load_average()},
        "script": {
            "q1": BARGE_LONG,
            "q1_at_s": LEAD_S,
            "thanks": CALLER_THANKS,
            "thanks_at_s": THANKS_AT_S,
            "q2": BARGE_SECOND,
            "q2_at_s": Q2_AT_S,
            "agent_line": AGENT_LINE,
            "agent_lead_s": AGENT_LEAD_S,
            "agent_listen_s": AGENT_LISTEN_S,
        },
    }
    summary.update(summarize(records, rounds))
    summary["round_records"] = rounds
    summary["records"] = records
    return summary


# --- CLI ------------------------------------------------------------------------------------


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target-sip", required=True, help="kefu's SIP address, HOST:PORT")
    parser.add_argument("--target-http", required=True, help="kefu's HTTP base URL")
    parser.add_argument(
        "--cycles", type=_positive_int, default=5, help="rounds, one after another (default 5)"
    )
    parser.add_argument(
        "--concurrent-agents",
        type=_positive_int,
        default=1,
        metavar="K",
        help="callers taken over at once in a round, one agent each (default 1)",
    )
    parser.add_argument(
        "--ai-calls", type=int, default=0, metavar="M", help="callers per round left to the AI"
    )
    parser.add_argument(
        "--stagger", type=float, default=STAGGER_S, help="seconds between callers' starts"
    )
    parser.add_argument(
        "--cut-in",
        type=float,
        default=CUT_IN_S,
        help=f"seconds from the agent hearing the bot's answer to the click (default {CUT_IN_S})",
    )
    parser.add_argument("--kefu-pid", type=int, help="kefu's PID: report its CPU (/proc)")
    parser.add_argument("--token", help="agent JWT instead of minting one")
    parser.add_argument("--config", help="kefu config file for the JWT secret")
    parser.add_argument("--keep", help="keep captures, WAVs and the agent's recordings here")
    parser.add_argument("--json", dest="json_out", help="also write the JSON summary here")


def settings_from_args(args: argparse.Namespace) -> Settings:
    target_sip = str(args.target_sip).removeprefix("sip:")
    return Settings(
        target_sip=target_sip,
        target_http=args.target_http,
        cycles=args.cycles,
        agents=args.concurrent_agents,
        ai_calls=max(0, args.ai_calls),
        stagger_s=args.stagger,
        cut_in_s=args.cut_in,
        kefu_pid=args.kefu_pid,
        token=args.token,
        config_path=args.config,
        keep=Path(args.keep) if args.keep else None,
    )


def main(args: argparse.Namespace) -> int:
    summary = run(settings_from_args(args))
    text = json.dumps(summary, indent=2, default=str)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    brief = {k: v for k, v in summary.items() if k not in ("records", "round_records")}
    sys.stdout.write(json.dumps(brief, indent=2, default=str) + "\n\n")
    sys.stdout.write(HEADER + "\n" + table_row(summary) + "\n")
    every = summary["takeovers"] > 0 and summary["ok"] == summary["takeovers"]
    return 0 if every and summary["measured"] == summary["takeovers"] else 1
