"""The agent workbench (``/agent``) in real Chromium takes a live SIP call over from kefu's AI
and hands it back.

A SIPp caller asks kefu (AI mode) about the opening hours; a second into the bot's answer the
page (``agent_driver.mjs`` driving ``window.kefuAgent``) takes the call over: it joins the
call's room with Chromium's fake microphone playing a piper line, the caller hears that line
and none of the bot's answer, the page hears the caller thank the agent, and after the
hand-back the AI answers the caller's next question. A second agent's page trying to take the
same call is refused (409 naming the first) and says so. The same again with a WebRTC caller
whose room a room worker hosts.

Run inside a private network namespace:
``unshare -n sh -c 'ip link set lo up && KEFU_NETNS=1 python3 -m pytest tests/browser -q'``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from browser.chromium import CHROMIUM, REPO, heard, kefu_env, require_chromium
from conftest import KefuProcess, start_kefu
from helpers.speech import heard_text

from kefu.signaling.shards import shard_of
from kefu.signaling.tokens import mint_token
from loadtest.pcap import write_wav
from loadtest.voice import Heard, Question, build_script, run_sip, run_webrtc
from loadtest.voice_report import turns_of

pytestmark = [pytest.mark.netns, pytest.mark.peer]

DRIVER = Path(__file__).with_name("agent_driver.mjs")
AGENT_LINE = "Hello, this is Maria from the service team."
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
HANDBACK_S = 17.0  # after the call was answered: between the caller's thanks and next question


def words(text: str) -> str:
    return " ".join(text.lower().replace(",", " ").replace(".", " ").split())


class Driver:
    """``agent_driver.mjs`` as a child process: :meth:`wait_ready` once its pages are signed
    in, :meth:`result` its final JSON line once the call has ended."""

    def __init__(self, tmp_path: Path, spec: dict[str, Any]) -> None:
        path = tmp_path / "agent-spec.json"
        path.write_text(json.dumps(spec))
        self.stderr = (tmp_path / "agent-driver.err").open("w")
        self.proc = subprocess.Popen(
            ["node", str(DRIVER), str(path)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )
        self.lines: list[dict[str, Any]] = []
        self.ready = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.append(json.loads(line))
                if self.lines[-1].get("ready"):
                    self.ready.set()
        self.ready.set()  # it exited: wait_ready reports that

    def wait_ready(self, timeout: float) -> None:
        self.ready.wait(timeout)
        if not any(line.get("ready") for line in self.lines):
            raise AssertionError(f"the agent pages never got ready: {self.lines[-1:]}")

    def result(self, timeout: float) -> dict[str, Any]:
        self.proc.wait(timeout)
        self.reader.join(10)
        final = [line for line in self.lines if not line.get("ready")]
        assert final, f"driver printed no result (rc {self.proc.returncode})"
        return final[-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.stderr.close()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    require_chromium()
    env, secret = kefu_env(tmp_path, KEFU_CALLS_MEDIA_MODE="ai")
    kefu = start_kefu(tmp_path, env=env)
    yield kefu, secret
    kefu.stop()


@pytest.fixture
def sharded_server(tmp_path: Path) -> Any:
    """kefu with one room worker besides the front (a 2-core box's default)."""
    require_chromium()
    env, secret = kefu_env(tmp_path, KEFU_CALLS_MEDIA_MODE="ai", KEFU_WEBRTC_ROOM_WORKERS="2")
    kefu = start_kefu(tmp_path, env=env)
    yield kefu, secret
    kefu.stop()


class Scene:
    """What both tests share: Whisper, the caller's script and the agent pages' spec."""

    def __init__(self, tmp_path: Path, kefu: KefuProcess, secret: str) -> None:
        import soxr

        from kefu.ai_bridge.listen.asr.whisper import WhisperAsr
        from kefu.ai_bridge.listen.heldout import piper_voice, speak

        voice = piper_voice()
        self.asr = WhisperAsr()
        assert self.asr.ready, self.asr.error
        self.tmp_path = tmp_path

        def ask(text: str) -> Question:
            return Question(text[:20], speak(voice, text, noise_scale=0, noise_w_scale=0), text)

        # The agent's fake microphone: the line, then silence long enough that Chromium's loop
        # of the file does not say it again before the hand-back. Chromium starts the file when
        # the page opens the microphone, which the takeover does.
        line = speak(voice, AGENT_LINE, noise_scale=0, noise_w_scale=0)
        mic = np.concatenate([line, np.zeros(16000 * 16, np.int16)])
        wav = tmp_path / "agent.wav"
        write_wav(wav, soxr.resample(mic, 16000, 48000).astype(np.int16), 48000)

        # The bot answers the hours from ~3.5 s; the page cuts in a second later, speaks ~3 s,
        # hears the caller's thanks and hands back at 17 s; then the caller asks again.
        self.script = build_script(
            [
                ask("What are your opening hours?"),
                ask("Thank you, that is very helpful."),
                ask("How long does delivery take?"),
            ],
            at=[1.0, 12.0, 22.0],
            tail_s=9.0,
        )
        url = f"{kefu.http}/agent?token="
        self.spec = {
            "chromium": CHROMIUM,
            "agent": {
                "url": url + mint_token(secret, "maria", "agent"),
                "wav": str(wav),
                "profile": str(tmp_path / f"profile-{secrets.token_hex(3)}"),
            },
            "rival": {"url": url + mint_token(secret, "bob", "agent")},
            "takeoverDelayMs": 1000,
            "handbackS": HANDBACK_S,
            "timeoutMs": 120000,
        }

    def run(self, call_the_bot: Callable[[], Heard]) -> tuple[Heard, dict[str, Any]]:
        """Start the agent pages, run the caller's call, return (call, the driver's result)."""
        driver = Driver(self.tmp_path, self.spec)
        try:
            driver.wait_ready(60)
            call = call_the_bot()
            result = driver.result(60)
        finally:
            driver.close()
        # For a look afterwards: the driver's result without the audio.
        path = self.tmp_path / "agent-result.json"
        path.write_text(json.dumps({**result, "heard": None}, indent=1))
        assert call.ok, call.error
        assert result["ok"], (result.get("error"), result.get("logs"))
        return call, result

    def check(self, call: Heard, result: dict[str, Any], room: str, to_call_clock: float) -> None:
        """Everything the issue asks of a takeover and a hand-back, whichever the caller was.
        ``to_call_clock``: add to the pages' UNIX times to get the call's clock."""
        asr = self.asr
        # The page's actions: maria took the call (the page joined its room, microphone on),
        # bob's page was refused with the owner named and said so, maria handed back.
        took = result["takeover"]
        assert took["ok"] and took["http"] == 200 and took["status"] == "human_active", took
        media = result["afterTakeover"]["media"]
        assert media["room"] == room and media["state"] == "in-call", media
        assert media["mic"] and media["micTrackEnabled"], media
        rival = result["rival"]
        assert rival["result"]["http"] == 409, rival
        assert rival["result"]["error"]["owner"] == "maria", rival
        assert rival["media"] is None, rival  # it asked first: no microphone opened
        assert "Already taken by maria" in rival["errorText"], rival
        back = result["handback"]
        assert back["ok"] and back["http"] == 200 and back["status"] == "ai_active", back
        assert result["afterHandback"]["media"]["mic"] is False, result["afterHandback"]
        changes = [
            (e["old"], e["new"]) for e in result["events"] if e["type"] == "call.state_changed"
        ]
        assert ("ai_active", "human_active") in changes, changes
        assert ("human_active", "ai_active") in changes, changes

        # What the caller heard: the bot's answer began before the takeover; from the
        # takeover to the hand-back only the agent, none of the bot's answer.
        t = {k: v for k, v in result["timings"].items() if isinstance(v, list)}
        t = {k: [x + to_call_clock for x in v] for k, v in t.items()}
        asked = call.speech_ends[0]
        assert asked is not None
        before = words(asr.transcribe_sync(call.reply_between(asked, t["takeover"][0])).text)
        during_pcm = call.reply_between(t["takeover"][1], t["handback"][0])
        during = words(asr.transcribe_sync(during_pcm).text)
        # What the page played (one recording per remote track it was sent).
        played = [soxr_16k(pcm) for pcm in heard(result)]
        for i, pcm in enumerate(played):
            write_wav(self.tmp_path / f"page-heard-{i}.wav", pcm, 16000)
        page_heard = " ".join(heard_text(asr, pcm, 16000) for pcm in played)
        (self.tmp_path / "heard.json").write_text(
            json.dumps({"before": before, "during": during, "page": page_heard}, indent=1)
        )
        assert "open" in before or "monday" in before, before
        assert "maria" in during and "service team" in during, during
        assert not any(w in during for w in WEEKDAYS), during
        # The page heard the caller thanking the agent.
        assert played, result["logs"]
        assert "thank you" in page_heard, page_heard

        # After the hand-back the AI answers the next question, and only once the caller asked.
        turns = turns_of([call], None, asr)
        assert "business days" in words(turns[2].get("reply_text", "")), turns[2]
        assert call.speech_starts[2] is not None
        handed_back = t["handback"][1] + 1.0
        assert not call.voiced_within(handed_back, call.speech_starts[2]), "AI spoke first"

        # The page showed the caller's words as transcript lines (kefu keeps transcribing the
        # caller while a human has the call).
        said = [words(li["text"]) for li in result["transcript"] if li["speaker"] == "caller"]
        assert any("hour" in s for s in said), result["transcript"]
        assert any("thank" in s for s in said), result["transcript"]
        assert any("deliver" in s for s in said), result["transcript"]


def soxr_16k(pcm: np.ndarray) -> np.ndarray:
    import soxr

    return soxr.resample(pcm, 48000, 16000).astype(np.int16)


# kefu loads its AI, this process Whisper and piper, and the call lasts ~34 s: about a minute
# on an idle 2-core box, over the default 120 s under load.
@pytest.mark.timeout(300)
def test_the_workbench_takes_a_call_over_mid_answer_and_hands_it_back(
    server: tuple[KefuProcess, str], tmp_path: Path
) -> None:
    kefu, secret = server
    scene = Scene(tmp_path, kefu, secret)
    call, result = scene.run(lambda: run_sip(kefu.sip, [scene.script], tmp_path / "sip")[0])
    # SIPp's capture times and the pages' clock are both this host's UNIX time.
    scene.check(call, result, f"call:{result['callId']}", 0.0)


@pytest.mark.timeout(360)
def test_the_workbench_takes_a_web_call_hosted_by_a_room_worker_over_and_back(
    sharded_server: tuple[KefuProcess, str], tmp_path: Path
) -> None:
    """The same with a WebRTC caller (kefu's aiortc client) whose room lives in the room
    worker: the front lists the worker's call, forwards the takeover and hand-back, relays
    the page's signaling there; the worker's SFU lets only the holder be heard."""
    kefu, secret = sharded_server
    scene = Scene(tmp_path, kefu, secret)
    room = next(r for r in (f"web-{secrets.token_hex(4)}" for _ in range(64)) if shard_of(r, 2))

    def web_caller() -> Heard:
        [call] = asyncio.run(run_webrtc(kefu.http, [scene.script], secret=secret, rooms=[room]))
        return call

    call, result = scene.run(web_caller)
    assert result["callId"] == f"room:{room}", result["callId"]
    # The aiortc caller keeps time.monotonic(); the pages, this host's UNIX time.
    scene.check(call, result, room, time.monotonic() - time.time())
