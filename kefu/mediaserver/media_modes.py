"""The media modes: what an answered call's RTP endpoint plays (``calls.media_mode``).

* ``ai`` — the AI agent (:class:`~kefu.ai_bridge.agent.CallAgent`) hears the caller and
  speaks; its models load in the background after the ports open (:meth:`MediaModes.load_ai`);
* ``prompt`` — a WAV (``calls.prompt_wav``, or a built-in chime), then echo;
* ``echo`` — the caller's own packets, reflected;
* ``calls.sip_room`` set — the call joins a WebRTC room and plays the room's mix instead.

The AI services loaded here also give WebRTC rooms their bot (``RoomService.make_bot``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import structlog
from aiortc.mediastreams import MediaStreamTrack

from kefu.ai_bridge.agent import CallAgent, HandoffRequested
from kefu.ai_bridge.dialog.state import SessionStore
from kefu.ai_bridge.listen.asr.language import call_language
from kefu.ai_bridge.services import AiServices
from kefu.ai_bridge.settings import AiSettings
from kefu.codecs.info import codec_info
from kefu.mediaserver.bus import EventBus
from kefu.mediaserver.call import Call
from kefu.mediaserver.config import Config
from kefu.mediaserver.events import AgentNote
from kefu.mediaserver.media import PcmTrack, PromptThenEcho, chime, load_wav
from kefu.mediaserver.metrics import Metrics
from kefu.mediaserver.recording import RecordingPolicy, RecordingWriter
from kefu.mediaserver.room_calls import room_call_id
from kefu.mediaserver.rooms import RoomService

log = structlog.get_logger("kefu.server")


class MediaModes:
    """Starts an answered call's media in the configured mode; owns the AI services."""

    def __init__(
        self,
        config: Config,
        metrics: Metrics,
        bus: EventBus,
        rooms: RoomService,
        *,
        on_handoff: Callable[[Call, str], None],
    ) -> None:
        self.config = config
        self.metrics = metrics
        self.bus = bus
        self.rooms = rooms
        self.on_handoff = on_handoff
        """Called when the AI asks for a human (the SIP side transfers the call)."""
        self.ai: AiServices | None = None
        self.recordings: RecordingWriter | None = None
        """Records the calls it starts that :attr:`record_policy` picks (set by the server)."""
        self.record_policy = RecordingPolicy.from_config(config.calls)
        """``calls.record`` / ``calls.record_trunks``: which calls are recorded."""
        self.session_store: SessionStore | None = None
        """Where the dialog keeps its per-call state (None: in memory; a cluster replicates
        it to Redis)."""
        self.prompt = None
        if config.calls.prompt_wav:  # outbound calls may ask for prompt in any mode
            self.prompt = load_wav(config.calls.prompt_wav)

    # --- the AI's models ---------------------------------------------------------------------

    async def load_ai(self) -> None:
        t0 = time.monotonic()
        ai = await AiServices.start(self._ai_settings(), registry=self.metrics.registry)
        if self.session_store is not None and ai.dialog is not None:
            ai.dialog.store = self.session_store
        self.ai = ai
        for reader in ai.event_readers():
            self.bus.attach(reader)
        log_file = ai.interaction_log
        if log_file is not None:  # agents' notes join the turns in the interaction record

            def notes(event: object) -> None:
                if isinstance(event, AgentNote):
                    log_file.write(note_record(event))

            self.bus.attach(notes)
        self.rooms.make_bot = self._room_agent
        log.info("ai_loaded", seconds=round(time.monotonic() - t0, 1), ready=ai.ready)

    @property
    def ai_loading(self) -> bool:
        return self.config.calls.media_mode == "ai" and self.ai is None

    def _ai_settings(self) -> AiSettings:
        ai = self.config.ai
        state = self.config.state_path
        kb_dir = ai.kb_dir
        if kb_dir is None and (state / "kb" / "meta.json").exists():
            kb_dir = str(state / "kb")
        return replace(
            ai,
            cache_dir=ai.cache_dir or str(state / "cache"),
            kb_dir=kb_dir,
            interaction_log_mask=self.config.privacy.mask,
            interaction_log_key_file=self.config.privacy.key_file,
        )

    def _room_agent(self, room_id: str, hears: MediaStreamTrack, publish: Any) -> CallAgent:
        assert self.ai is not None
        ai = self.config.ai
        lang = call_language(ai.language, room=room_id, by_room=ai.language_by_room)
        return CallAgent(self.ai, room_call_id(room_id), hears, publish=publish, lang=lang)

    # --- a call's media ----------------------------------------------------------------------

    def start(self, call: Call) -> None:
        """Start the negotiated RTP stream and plug in what the mode plays."""
        n, ep = call.negotiated, call.endpoint
        assert n is not None and ep is not None
        ep.start(
            (n.remote_address, n.remote_port),
            codec_info(n.codec),
            n.payload_type,
            n.dtmf_payload_type,
            n.ptime,
            (n.remote_address, n.remote_rtcp_port),
            direction=n.direction,
            srtp=n.srtp,
        )
        dropped = self.metrics.rtp_dropped
        ep.on_srtp_drop = lambda drop: dropped.labels(drop.reason).inc()
        if (
            self.recordings is not None
            and call.recording is None
            and self.record_policy.records(call.trunk_host)
        ):
            call.recording = self.recordings.open(call.id, ep.loop_time())
            ep.recorder = call.recording.feed
        mode = call.media_mode or self.config.calls.media_mode
        if self.config.calls.sip_room and call.media_mode is None:
            return  # the room's mix is played once the call has joined it
        if mode == "prompt":
            pcm = self.prompt if self.prompt is not None else chime()
            ep.play(PromptThenEcho(PcmTrack(pcm), ep.inbound))
        elif mode == "ai" and self.ai is not None:
            ep.inbound.prompt = True  # the AI hears each packet as it lands (kefu.rtp.track)
            agent = CallAgent(
                self.ai,
                call.id,
                ep.inbound,
                publish=lambda e: self._on_agent_event(call, e),
                settings=outbound_settings(self.ai.settings, call.context),
                lang=call.language,
            )
            call.agent = agent
            ep.play(agent.outbound)
            call.spawn(agent.start(), "agent-start")
        else:
            ep.reflect()

    async def join_room(self, call: Call, room_id: str) -> None:
        ep = call.endpoint
        assert ep is not None
        participant = await self.rooms.join_sip(room_id, call.id, ep.inbound)
        call.room = participant
        ep.play(participant.mixed_audio)
        call.log.info("sip_joined_room", room=room_id)

    def _on_agent_event(self, call: Call, event: object) -> None:
        self.bus.publish(event)
        if isinstance(event, HandoffRequested):
            call.log.info("handoff_requested", reason=event.reason, detail=event.detail)
            self.on_handoff(call, event.reason)


def outbound_settings(settings: AiSettings, context: dict[str, Any]) -> AiSettings:
    """The AI's settings for a call: an outbound call's ``context.greeting`` (a string)
    replaces the greeting, in every language (docs/trunk.md#outbound-calls)."""
    greeting = context.get("greeting")
    if not isinstance(greeting, str) or not greeting.strip():
        return settings
    return replace(settings, greeting_en=greeting, greeting_zh=greeting, greeting_auto=(greeting,))


def note_record(note: AgentNote) -> dict[str, object]:
    """An agent's note as a line of the interaction log."""
    return {
        "type": "note",
        "call_id": note.call_id,
        "at": note.at,
        "by": note.by,
        "text": note.text,
    }
