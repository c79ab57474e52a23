"""Call recordings: both directions of a phone call in one stereo WAV (``calls.record``).

Left channel: what the caller sent; right channel: what kefu sent them (the AI, a prompt, or
the agent who took the call over). The RTP endpoint hands every audio payload it receives
and sends, with the event loop's time, to the call's :class:`CallRecording` — the loop only
copies bytes into a queue. One writer thread per server decodes them, places each frame at
its time on the call's clock (a gap becomes silence, a burst is laid end to end), so the two
channels stay in sync, and appends them to two temporary mono files; when the call ends it
interleaves them into ``<recordings_dir>/<YYYY-MM-DD>/<call id>.wav`` (16-bit PCM at the
codec's rate; sealed with SM4 as ``.wav.sm4`` when ``privacy.key_file`` is set), written as
``.part`` and renamed, so a file with the final name is complete.

A write that fails (full disk, directory removed) is logged (``recording_failed``) and
counted; the call never notices. More than ``max_pending`` frames waiting for the thread
drops the newest (counted): memory stays bounded whatever the disk does. A call's close is
never dropped. :func:`prune` deletes recordings older than ``calls.recording_retention_days``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import queue
import re
import threading
import time
import wave
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import structlog

from kefu.codecs.registry import codec_info, make_decoder
from kefu.codecs.resample import resample
from kefu.errors import CodecError, ConfigError
from kefu.mediaserver.config import CallsConfig, Config
from kefu.privacy.seal import Sealer

__all__ = [
    "CALLER",
    "KEFU",
    "CallRecording",
    "RecordingPolicy",
    "RecordingWriter",
    "prepare_dir",
    "prune",
    "recordings_path",
]

log = structlog.get_logger("kefu.recording")

CALLER, KEFU = 0, 1
"""Channels: what the caller sent (left), what kefu sent (right)."""
PARTIAL = ".partial"
"""Sub-folder of the recordings folder holding the calls being recorded."""
_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class RecordingPolicy:
    """Which phone calls are recorded: every one, or those of some trunks (opt-in)."""

    every_call: bool
    """``calls.record``: record every phone call."""
    trunks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    """``calls.record_trunks``: record the calls whose trunk address is in one of these."""

    @classmethod
    def from_config(cls, calls: CallsConfig) -> RecordingPolicy:
        """From ``[calls]`` (its networks were checked when the config loaded)."""
        nets = tuple(ipaddress.ip_network(n, strict=False) for n in calls.record_trunks)
        return cls(calls.record, nets)

    @property
    def enabled(self) -> bool:
        """Whether any call can be recorded (a writer and a writable folder are needed)."""
        return self.every_call or bool(self.trunks)

    def records(self, trunk_host: str) -> bool:
        """Whether a call whose trunk is at ``trunk_host`` (an IP address) is recorded."""
        if self.every_call:
            return True
        try:
            address = ipaddress.ip_address(trunk_host.strip("[]"))
        except ValueError:
            return False
        return any(address.version == net.version and address in net for net in self.trunks)


def recordings_path(config: Config) -> Path:
    """``calls.recordings_dir``, or ``<state_dir>/recordings``."""
    configured = config.calls.recordings_dir
    return Path(configured).expanduser() if configured else config.state_path / "recordings"


def prepare_dir(path: Path) -> Path:
    """Create the recordings folder and check it takes files: ConfigError naming it if not."""
    try:
        (path / PARTIAL).mkdir(parents=True, exist_ok=True)
        probe = path / PARTIAL / f".probe-{os.getpid()}"
        probe.write_bytes(b"ok")
        probe.unlink()
    except OSError as exc:
        raise ConfigError(
            f"calls.recordings_dir {path} is not writable: {exc.strerror or exc}",
            key="calls.recordings_dir",
        ) from None
    return path


def prune(path: Path, retention_days: float, *, now: float | None = None) -> int:
    """Delete recordings older than ``retention_days`` (and calls' leftovers older than a
    day); returns how many files went. Runs on a thread: it walks the disk."""
    now = time.time() if now is None else now
    gone = 0
    for folder, _, files in os.walk(path):
        partial = Path(folder).name == PARTIAL
        limit = now - (86400.0 if partial else retention_days * 86400.0)
        for name in files:
            file = Path(folder) / name
            with contextlib.suppress(OSError):
                if (
                    partial or name.endswith((".wav", ".wav.part"))
                ) and file.stat().st_mtime < limit:
                    file.unlink()
                    gone += 1
        if folder != str(path) and not partial:
            with contextlib.suppress(OSError):
                os.rmdir(folder)  # only succeeds once a day's folder is empty
    return gone


@dataclass(eq=False)
class _Channel:
    raw: IO[bytes]
    path: Path
    cursor: int = 0
    """Samples written so far."""
    decoders: dict[str, Any] = field(default_factory=dict)


@dataclass(eq=False)
class _Call:
    call_id: str
    started: float
    """Event-loop time of sample 0."""
    channels: list[_Channel]
    rate: int = 0
    """Samples per second of the file (the first frame's codec); 0 until a frame came."""
    broken: bool = False


class CallRecording:
    """One call's recording, as its RTP endpoint feeds it (event-loop side)."""

    def __init__(self, writer: RecordingWriter, call_id: str, started: float) -> None:
        self.writer = writer
        self.call_id = call_id
        self.closed = False
        writer._submit(("open", call_id, started))

    def feed(self, channel: int, at: float, codec: str, payload: bytes) -> None:
        """One audio payload received (``CALLER``) or sent (``KEFU``) at loop time ``at``."""
        if not self.closed:
            self.writer._frame((self.call_id, channel, at, codec, payload))

    def close(self) -> None:
        """The call ended: the file is finished in the background."""
        if not self.closed:
            self.closed = True
            self.writer._submit(("close", self.call_id))


class RecordingWriter:
    """The writer thread of one server (see the module's doc)."""

    def __init__(
        self,
        directory: Path,
        *,
        max_pending: int = 20_000,
        on_result: Callable[[str], None] | None = None,
        sealer: Sealer | None = None,
    ) -> None:
        self.directory = directory
        self.sealer = sealer
        """Seal finished recordings with SM4 (``<call id>.wav.sm4``); None: plain WAV."""
        self.max_pending = max_pending
        self.on_result = on_result
        """Called (on the thread) with ``written`` or ``failed`` per recording."""
        self.dropped = 0
        self.written = 0
        self.failed = 0
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._calls: dict[str, _Call] = {}
        self._thread = threading.Thread(target=self._run, name="kefu-recordings", daemon=True)
        self._thread.start()

    def open(self, call_id: str, started: float) -> CallRecording:
        return CallRecording(self, call_id, started)

    def close(self, timeout: float = 30.0) -> None:
        """Finish what is queued (open calls are closed as they are) and stop the thread."""
        self._queue.put(None)
        self._thread.join(timeout)

    # --- event-loop side ------------------------------------------------------------------

    def _frame(self, item: tuple[Any, ...]) -> None:
        with self._lock:
            if self._pending >= self.max_pending:
                self.dropped += 1
                return
            self._pending += 1
        self._queue.put(("frame", *item))

    def _submit(self, item: tuple[Any, ...]) -> None:
        self._queue.put(item)  # control messages are never dropped

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                for call_id in list(self._calls):
                    self._finish(call_id)
                return
            kind = item[0]
            try:
                if kind == "frame":
                    with self._lock:
                        self._pending -= 1
                    self._write_frame(*item[1:])
                elif kind == "open":
                    self._open(item[1], item[2])
                elif kind == "close":
                    self._finish(item[1])
            except Exception:  # a bug here must not stop every later recording
                log.exception("recording_writer_failed", kind=kind)

    def _open(self, call_id: str, started: float) -> None:
        name = _SAFE.sub("_", call_id)
        partial = self.directory / PARTIAL
        try:
            partial.mkdir(parents=True, exist_ok=True)
            channels = []
            for side in ("caller", "kefu"):
                path = partial / f"{name}.{side}.raw"
                channels.append(_Channel(path.open("wb"), path))
        except OSError as exc:
            self._failed(call_id, "open", exc)
            self._calls[call_id] = _Call(call_id, started, [], broken=True)
            return
        self._calls[call_id] = _Call(call_id, started, channels)

    def _write_frame(
        self, call_id: str, channel: int, at: float, codec: str, payload: bytes
    ) -> None:
        call = self._calls.get(call_id)
        if call is None or call.broken:
            return
        track = call.channels[channel]
        decoder = track.decoders.get(codec)
        if decoder is None:
            decoder = track.decoders[codec] = make_decoder(codec)
        try:
            pcm = decoder.decode(payload)
        except CodecError:
            return
        rate = codec_info(codec).sample_rate
        if not call.rate:
            call.rate = rate
        elif rate != call.rate:
            pcm = resample(pcm, rate, call.rate)
        n = len(pcm)
        # A received frame was spoken just before it arrived; a sent one plays from now.
        end = at if channel == CALLER else at + n / call.rate
        start = max(track.cursor, round((end - call.started) * call.rate) - n)
        try:
            if start > track.cursor:
                track.raw.write(bytes(2 * (start - track.cursor)))
            track.raw.write(pcm.astype("<i2").tobytes())
        except OSError as exc:
            self._failed(call_id, "write", exc)
            self._discard(call)
            return
        track.cursor = start + n

    def _finish(self, call_id: str) -> None:
        call = self._calls.pop(call_id, None)
        if call is None or call.broken:
            return
        for track in call.channels:
            track.raw.close()
        if not call.rate:
            self._discard(call)  # no audio at all: nothing to keep
            return
        day = datetime.fromtimestamp(time.time(), UTC).strftime("%Y-%m-%d")
        final = self.directory / day / f"{_SAFE.sub('_', call_id)}.wav"
        if self.sealer is not None:
            final = final.with_suffix(".wav.sm4")
        part = final.with_name(final.name + ".part")
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            self._interleave(call, part)
            if self.sealer is not None:
                self._seal(part)
            os.replace(part, final)
        except OSError as exc:
            self._failed(call_id, "finish", exc)
            with contextlib.suppress(OSError):
                part.unlink()
            self._discard(call)
            return
        seconds = max(t.cursor for t in call.channels) / call.rate
        self._discard(call)
        self.written += 1
        log.info("recording_written", call_id=call_id, path=str(final), seconds=round(seconds, 2))
        if self.on_result is not None:
            self.on_result("written")

    @staticmethod
    def _interleave(call: _Call, path: Path, chunk: int = 1 << 16) -> None:
        total = max(t.cursor for t in call.channels)
        with (
            call.channels[0].path.open("rb") as left,
            call.channels[1].path.open("rb") as right,
            wave.open(str(path), "wb") as out,
        ):
            out.setnchannels(2)
            out.setsampwidth(2)
            out.setframerate(call.rate)
            done = 0
            while done < total:
                n = min(chunk, total - done)
                pair = np.zeros((n, 2), "<i2")
                for side, file in enumerate((left, right)):
                    got = np.frombuffer(file.read(2 * n), "<i2")
                    pair[: len(got), side] = got
                out.writeframes(pair.tobytes())
                done += n

    def _seal(self, path: Path) -> None:
        """Replace the finished WAV at ``path`` by its sealed form (same name)."""
        assert self.sealer is not None
        sealed = path.with_name(path.name + ".sealing")
        try:
            with path.open("rb") as plain, sealed.open("wb") as out:
                self.sealer.seal_file(plain, out)
            os.replace(sealed, path)
        finally:
            with contextlib.suppress(OSError):
                sealed.unlink()

    def _discard(self, call: _Call) -> None:
        call.broken = True
        for track in call.channels:
            with contextlib.suppress(OSError):
                track.raw.close()
                track.path.unlink()

    def _failed(self, call_id: str, step: str, exc: OSError) -> None:
        self.failed += 1
        log.error("recording_failed", call_id=call_id, step=step, error=str(exc))
        if self.on_result is not None:
            self.on_result("failed")
