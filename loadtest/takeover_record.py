"""One takeover of ``python -m loadtest takeover`` as a record: every measure, from the capture
at the caller (:class:`loadtest.takeover_caller.CallWire`) and the agent's marks.

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
voiced frame came during the agent's turn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from loadtest.takeover_bot_agent import last_audible, repeat_after, split_bot_agent
from loadtest.takeover_caller import CALLER_THANKS, CallWire
from loadtest.takeover_caller_frames import best_match, estimate_lag, pick_track
from loadtest.takeover_frames import Frame
from loadtest.voice import BARGE_SECOND, FRAME_S, VOICED_RMS

TARGET_MS = 100.0


def ms(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return round((later - earlier) * 1000, 1)


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
