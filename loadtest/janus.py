"""Janus 1.1 videoroom as the reference SFU for ``webrtc-load --compare-janus``.

The same load shape as kefu's (rooms x participants, each publishing one Opus stream and
hearing the others) runs against Debian's ``janus`` driven over its HTTP API
(``/janus``: create session, attach ``janus.plugin.videoroom``, long-poll for events):

* publisher: ``joinandconfigure`` (ptype publisher, our own feed id) with the aiortc offer;
  the answer arrives as an event;
* subscriber: after every publisher of the room is connected (Janus offers only the feeds
  that exist), one ``join`` (ptype subscriber) for all the room's other feeds; Janus offers,
  the client answers with ``start``.

Both peer connections gather every candidate before sending SDP (``trickle: false``).
Janus (libnice) never gathers host candidates on an interface flagged IFF_LOOPBACK, which is
the only interface of the benchmark's network namespace; :file:`janus_shim.c`, compiled here
at run time into a temporary directory, clears that flag in ``getifaddrs()`` (LD_PRELOAD).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadtest.webrtc_load_client import ParticipantSpec, looped_opus_track, tap_receivers

SHIM_SOURCE = Path(__file__).with_name("janus_shim.c")
JANUS_LIBS = Path("/usr/lib/x86_64-linux-gnu/janus")
HOST = "127.0.0.1"
FEED_BASE = 100_000
"""Feed ids are FEED_BASE * room + index, so every worker knows its room's feeds."""


def available() -> str | None:
    """None when Janus can run here, else why not."""
    for tool in ("janus", "gcc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get -y --no-install-recommends install janus)"
    if not (JANUS_LIBS / "plugins" / "libjanus_videoroom.so").exists():
        return f"no videoroom plugin under {JANUS_LIBS}"
    return None


# --- the Janus process ------------------------------------------------------------------------


@dataclass
class JanusProcess:
    """A Janus started by this tool (stopped by its PID only)."""

    proc: subprocess.Popen[bytes]
    http_port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.http_port}/janus"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # Janus's own clean shutdown
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def _configure(workdir: Path, http_port: int) -> Path:
    """Config folder with only the videoroom plugin and the HTTP transport enabled."""
    conf = workdir / "janus-conf"
    for sub in ("plugins", "transports"):
        (conf / sub).mkdir(parents=True, exist_ok=True)
    # Janus loads every plugin in its folders; link in only the two we use.
    (conf / "plugins" / "libjanus_videoroom.so").symlink_to(
        JANUS_LIBS / "plugins" / "libjanus_videoroom.so"
    )
    (conf / "transports" / "libjanus_http.so").symlink_to(
        JANUS_LIBS / "transports" / "libjanus_http.so"
    )
    (conf / "janus.jcfg").write_text(
        "general: {\n"
        f'  configs_folder = "{conf}"\n'
        f'  plugins_folder = "{conf / "plugins"}"\n'
        f'  transports_folder = "{conf / "transports"}"\n'
        "  debug_level = 3\n  session_timeout = 120\n}\n"
        'media: {\n  rtp_port_range = "40000-49999"\n}\n'
        'nat: {\n  ice_enforce_list = "lo"\n  nice_debug = false\n}\n'
    )
    (conf / "janus.transport.http.jcfg").write_text(
        "general: {\n  http = true\n"
        f'  port = {http_port}\n  interface = "lo"\n  ip = "{HOST}"\n'
        '  base_path = "/janus"\n  https = false\n}\nadmin: {\n  admin_http = false\n}\n'
    )
    (conf / "janus.plugin.videoroom.jcfg").write_text("general: {\n}\n")
    return conf


def start_janus(workdir: Path, http_port: int = 8188) -> JanusProcess:
    """Compile the shim, write the config, start ``janus`` and wait for its HTTP API."""
    shim = workdir / "janus_shim.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O2", "-o", str(shim), str(SHIM_SOURCE), "-ldl"],
        check=True,
        capture_output=True,
    )
    conf = _configure(workdir, http_port)
    log_path = workdir / "janus.log"
    env = {**os.environ, "LD_PRELOAD": str(shim)}
    cmd = ["janus", "-C", str(conf / "janus.jcfg"), "-F", str(conf), "-E", "lo"]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    janus = JanusProcess(proc, http_port, log_path)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(janus.url + "/info", timeout=2) as resp:
                if json.loads(resp.read()).get("janus") == "server_info":
                    return janus
        except OSError:
            time.sleep(0.1)  # the HTTP port opens when Janus is ready; nothing to await
    janus.stop()
    raise RuntimeError(f"janus did not start: {log_path.read_text(errors='replace')[-2000:]}")


def _post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    body = {**body, "transaction": secrets.token_hex(6)}
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        answer: dict[str, Any] = json.loads(resp.read())
    if answer.get("janus") == "error":
        raise RuntimeError(f"janus: {answer.get('error')}")
    return answer


def create_rooms(url: str, rooms: int, per_room: int) -> None:
    """Audio-only videorooms 1000, 1001, ... (a synchronous request each)."""
    session = _post(url, {"janus": "create"})["data"]["id"]
    handle = _post(f"{url}/{session}", {"janus": "attach", "plugin": "janus.plugin.videoroom"})
    base = f"{url}/{session}/{handle['data']['id']}"
    for r in range(rooms):
        body = {
            "request": "create",
            "room": 1000 + r,
            "publishers": per_room,
            "audiocodec": "opus",
            "is_private": True,
        }
        data = _post(base, {"janus": "message", "body": body})["plugindata"]["data"]
        if "error" in data and data.get("error_code") != 427:  # 427: already exists
            raise RuntimeError(f"janus room create: {data['error']}")
    _post(f"{url}/{session}", {"janus": "destroy"})


# --- one participant (runs in the workers) ----------------------------------------------------


def make_janus_participant(spec: ParticipantSpec, packets: list[bytes]) -> Any:
    return JanusParticipant(spec, packets)


class JanusParticipant:
    """Publisher and subscriber peer connections of one participant, one Janus session."""

    def __init__(self, spec: ParticipantSpec, packets: list[bytes]) -> None:
        from aiortc import RTCPeerConnection

        self.spec = spec
        self.mic = looped_opus_track(packets)
        self.tallies: dict[int, Any] = {}
        self.offer_sent_at: float | None = None
        self.connected_at: float | None = None
        self.pub = RTCPeerConnection()
        self.pub.addTrack(self.mic)
        self.sub = RTCPeerConnection()
        self.sub.on("track", lambda track: tap_receivers(self.sub, self.tallies))
        self._events: dict[int, asyncio.Queue[dict[str, Any]]] = {}
        self._session: Any = None
        self._base = ""
        self._poller: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self.pub.on("connectionstatechange", self._on_pub_state)

    @property
    def sent(self) -> int:
        return int(self.mic.sent)

    @property
    def connect_time(self) -> float | None:
        if self.offer_sent_at is None or self.connected_at is None:
            return None
        return self.connected_at - self.offer_sent_at

    def _on_pub_state(self) -> None:
        if self.pub.connectionState == "connected" and not self._connected.is_set():
            self.connected_at = time.monotonic()
            self._connected.set()

    async def _request(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "transaction": secrets.token_hex(6)}
        async with self._session.post(self._base + path, json=body) as resp:
            answer: dict[str, Any] = await resp.json(content_type=None)
        if answer.get("janus") == "error":
            raise RuntimeError(f"janus: {answer.get('error')}")
        return answer

    async def _attach(self, session_path: str) -> int:
        answer = await self._request(
            session_path, {"janus": "attach", "plugin": "janus.plugin.videoroom"}
        )
        handle = int(answer["data"]["id"])
        self._events[handle] = asyncio.Queue(maxsize=64)
        return handle

    async def _poll(self, session_path: str) -> None:
        while True:
            url = f"{self._base}{session_path}?maxev=8&rid={time.monotonic_ns()}"
            async with self._session.get(url) as resp:
                batch = await resp.json(content_type=None)
            for event in batch if isinstance(batch, list) else [batch]:
                queue = self._events.get(int(event.get("sender", 0)))
                if queue is not None and not queue.full():
                    queue.put_nowait(event)

    async def _until_jsep(self, handle: int) -> dict[str, Any]:
        while True:
            event = await asyncio.wait_for(self._events[handle].get(), 15.0)
            data = event.get("plugindata", {}).get("data", {})
            if "error" in data:
                raise RuntimeError(f"janus videoroom: {data['error']}")
            if "jsep" in event:
                return event

    async def _local_sdp(self, pc: Any, description: Any) -> str:
        from kefu.sfu import ice

        with ice.host_addresses((HOST,)):
            await pc.setLocalDescription(description)
        return str(pc.localDescription.sdp)

    async def publish(self, url: str) -> None:
        import aiohttp

        self._base = url
        self._session = aiohttp.ClientSession()
        created = await self._request("", {"janus": "create"})
        session_path = f"/{created['data']['id']}"
        self._poller = asyncio.get_running_loop().create_task(self._poll(session_path))
        self._pub_handle = await self._attach(session_path)
        self._sub_handle = await self._attach(session_path)
        self._session_path = session_path
        sdp = await self._local_sdp(self.pub, await self.pub.createOffer())
        body = {
            "request": "joinandconfigure",
            "room": int(self.spec.room),
            "ptype": "publisher",
            "id": FEED_BASE * int(self.spec.room) + self.spec.index,
            "audio": True,
            "video": False,
        }
        self.offer_sent_at = time.monotonic()
        await self._request(
            f"{session_path}/{self._pub_handle}",
            {"janus": "message", "body": body, "jsep": {"type": "offer", "sdp": sdp}},
        )
        answer = (await self._until_jsep(self._pub_handle))["jsep"]
        from aiortc import RTCSessionDescription

        await self.pub.setRemoteDescription(RTCSessionDescription(answer["sdp"], "answer"))
        await asyncio.wait_for(self._connected.wait(), 15.0)

    async def subscribe(self, url: str) -> None:
        from aiortc import RTCSessionDescription

        room = int(self.spec.room)
        feeds = [
            {"feed": FEED_BASE * room + i}
            for i in range(self.spec.per_room)
            if i != self.spec.index
        ]
        path = f"{self._session_path}/{self._sub_handle}"
        body = {"request": "join", "room": room, "ptype": "subscriber", "streams": feeds}
        await self._request(path, {"janus": "message", "body": body})
        offer = (await self._until_jsep(self._sub_handle))["jsep"]
        await self.sub.setRemoteDescription(RTCSessionDescription(offer["sdp"], "offer"))
        sdp = await self._local_sdp(self.sub, await self.sub.createAnswer())
        await self._request(
            path,
            {
                "janus": "message",
                "body": {"request": "start"},
                "jsep": {"type": "answer", "sdp": sdp},
            },
        )

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
        await self.pub.close()
        await self.sub.close()
        if self._session is not None:
            try:
                await self._request(self._session_path, {"janus": "destroy"})
            except (OSError, RuntimeError, AttributeError):
                pass  # Janus is being stopped anyway
            await self._session.close()


# --- the comparison run -----------------------------------------------------------------------


def run_janus(workdir: Path, run: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """Start Janus, run the load (``run(server)``), stop it; ``{"error": ...}`` when it
    cannot run here."""
    from loadtest.webrtc_load import Server

    why = available()
    if why:
        return {"error": why}
    janus = start_janus(workdir)
    try:
        server = Server(
            "janus",
            janus.pid,
            janus.url,
            prepare=lambda rooms, per_room: create_rooms(janus.url, rooms, per_room),
        )
        result = run(server)
        result["janus_version"] = _version()
        return result
    except (RuntimeError, TimeoutError, OSError) as exc:
        log = janus.log_path.read_text(errors="replace")[-1500:]
        return {"error": f"{type(exc).__name__}: {exc}", "janus_log_tail": log}
    finally:
        janus.stop()


def _version() -> str:
    out = subprocess.run(["janus", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.split("\n")[0].strip()
