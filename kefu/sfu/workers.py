"""Sharding rooms over worker processes — DESIGN ONLY, not implemented yet.

Why: one Python process saturates near 15 audio peer connections (the GIL: SRTP, DTLS,
ICE consent and RTP handling all run on one event loop). Forwarding (kefu.sfu.forward)
removes decode/encode, but a node with N cores still needs N processes to use them.

Design:

* The parent process keeps signaling (aiohttp, /ws, auth) and a ``ShardedSfu`` that has the
  exact :class:`kefu.sfu.api.Sfu` contract, so signaling does not know about sharding.
* ``ShardedSfu`` starts N = ``os.cpu_count()`` workers (``multiprocessing`` spawn context),
  each running an ordinary ``Sfu`` on its own event loop (uvloop), connected by an asyncio
  stream pair over a socketpair. A room lives in exactly one worker: assignment is made at
  the room's first join (least participants, ties by index) and forgotten when the room
  closes, so rooms never span processes and forwarding stays in-process.
* Wire format on the pipe: length-prefixed JSON frames ``{"id", "op", "args"}`` for calls
  (join, handle_offer, create_offer, handle_answer, add_ice_candidate, publish_event, leave,
  rooms, sweep) and ``{"id", "ok"|"error": {"code", "message"}}`` replies, errors re-raised
  in the parent as the same kefu.sfu.errors class looked up by ``code``. Callbacks
  (on_ice_candidate, on_renegotiation_needed, on_event, on_state) come back as unsolicited
  ``{"participant", "cb", "args"}`` frames dispatched to a parent-side ``ParticipantProxy``.
* ``join_local`` (SIP legs, the AI agent) cannot cross a pipe as a MediaStreamTrack: the
  call's media leg must live in the room's worker, so the call layer asks ``ShardedSfu``
  which worker owns the room and runs the leg there, or the audio crosses as 20 ms PCM
  frames on a second per-participant stream (bounded, drop-oldest) — to be decided with the
  mediaserver owner.
* A worker that dies fails its rooms' participants (on_state("failed")), the supervisor
  restarts it; per-worker limits are ``max_rooms / N``.
* Each worker binds its own UDP ports; ``ice_host_addresses`` applies unchanged.

Until this exists, kefu runs one ``Sfu`` per process; scale out with more nodes.
"""
