"""Write RTP pcaps that SIPp can replay, read captures back, and make a test speech signal.

The files are classic libpcap (magic ``a1b2c3d4``, microsecond timestamps, LINKTYPE_ETHERNET)
because SIPp's ``play_pcap_audio`` opens them with ``pcap_open_offline`` and only accepts
Ethernet or Linux-cooked link types. SIPp rewrites the UDP ports (every packet is shifted by
``its dport - the smallest dport in the file``), so all packets here share one destination
port: a DTMF packet on another port would be sent to the wrong place.

Reading accepts classic pcap (either byte order, µs or ns) and pcapng, since ``tshark -w``
writes pcapng unless told ``-F pcap``.
"""

from __future__ import annotations

import math
import struct
import wave
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from kefu.codecs import g711
from kefu.codecs.dtmf import dtmf_packets
from kefu.rtp.packet import RtpPacket

PCMU = 0
PCMA = 8
TELEPHONE_EVENT = 101
SAMPLE_RATE = 8000
PTIME_S = 0.020
SAMPLES_PER_PACKET = 160

LINKTYPE_NULL = 0
LINKTYPE_ETHERNET = 1
LINKTYPE_RAW = 101
LINKTYPE_LINUX_SLL = 113

_PCAP_MAGIC_US = 0xA1B2C3D4
_PCAP_MAGIC_NS = 0xA1B23C4D
_PCAPNG_SHB = 0x0A0D0D0A
# Fixed epoch so generated files are byte-for-byte reproducible (golden tests).
DEFAULT_EPOCH = 1_700_000_000.0


Int16Array = npt.NDArray[np.int16]


# --- G.711 and RTP -------------------------------------------------------------------------


def g711_encode(pcm: Int16Array, payload_type: int) -> bytes:
    """Encode int16 PCM as G.711 µ-law (pt 0) or A-law (pt 8) with kefu's codec."""
    pcm = np.ascontiguousarray(pcm, dtype=np.int16)
    if payload_type == PCMU:
        return g711.ulaw_encode(pcm)
    if payload_type == PCMA:
        return g711.alaw_encode(pcm)
    raise ValueError(f"G.711 payload type must be 0 or 8, not {payload_type}")


def g711_decode(payload: bytes, payload_type: int) -> Int16Array:
    """Decode a G.711 payload (pt 0 or 8) to int16 PCM with kefu's codec."""
    if payload_type == PCMU:
        return g711.ulaw_decode(payload)
    if payload_type == PCMA:
        return g711.alaw_decode(payload)
    raise ValueError(f"G.711 payload type must be 0 or 8, not {payload_type}")


@dataclass(frozen=True, slots=True)
class DtmfEvent:
    """One RFC 4733 telephone-event to insert into a generated stream."""

    digit: str
    """The key: 0-9, *, #, A-D (RFC 4733 §3.2 event codes 0-15)."""
    at: float
    """Start, in seconds from the first packet; rounded to a 20 ms packet slot."""
    duration: float = 0.1
    """How long the key is held, seconds (RFC 4733 §2.5.1.2: one update per packet)."""
    volume: int = 10
    """Power level in -dBm0, 0-63 (RFC 4733 §2.3.4)."""


def rtp_packets_from_pcm(
    pcm: Int16Array,
    *,
    payload_type: int = PCMU,
    dtmf: Sequence[DtmfEvent] = (),
    dtmf_payload_type: int = TELEPHONE_EVENT,
    ssrc: int = 0x4B454655,
    first_seq: int = 1000,
    first_timestamp: int = 160_000,
) -> list[tuple[float, bytes]]:
    """Packetise 8 kHz PCM into 20 ms G.711 RTP packets, with DTMF events in place of audio.

    Returns (offset in seconds, RTP packet) pairs; the offsets pace the stream. An event's
    packets (kefu.codecs.dtmf.dtmf_packets: updates, then the end packet three times)
    replace the audio of the slots they occupy, share the stream's SSRC and sequence space,
    and all carry the timestamp of the event's first slot (RFC 4733 §2.5.1.1).
    """
    pcm = np.asarray(pcm, dtype=np.int16)
    n_audio = math.ceil(len(pcm) / SAMPLES_PER_PACKET)
    padded = np.zeros(n_audio * SAMPLES_PER_PACKET, dtype=np.int16)
    padded[: len(pcm)] = pcm
    encoded = g711_encode(padded, payload_type)

    # slot -> (event payload, marker, first slot of the event)
    events: dict[int, tuple[bytes, bool, int]] = {}
    for ev in sorted(dtmf, key=lambda e: e.at):
        start = int(round(ev.at / PTIME_S))
        packets = dtmf_packets(
            ev.digit, duration_ms=int(round(ev.duration * 1000)), packet_ms=20, volume=ev.volume
        )
        for k, (event, marker) in enumerate(packets):
            if start + k in events:
                raise ValueError(f"DTMF event {ev.digit!r} at {ev.at} s overlaps another")
            events[start + k] = (event.serialize(), marker, start)

    n_slots = max([n_audio, *(slot + 1 for slot in events)])
    silence = g711_encode(np.zeros(SAMPLES_PER_PACKET, np.int16), payload_type)
    out: list[tuple[float, bytes]] = []
    for slot in range(n_slots):
        seq = (first_seq + slot) & 0xFFFF
        if slot in events:
            payload, marker, start = events[slot]
            ts = first_timestamp + start * SAMPLES_PER_PACKET
            pt = dtmf_payload_type
        else:
            ts = first_timestamp + slot * SAMPLES_PER_PACKET
            payload = encoded[slot * SAMPLES_PER_PACKET : (slot + 1) * SAMPLES_PER_PACKET]
            payload, marker, pt = payload or silence, slot == 0, payload_type
        pkt = RtpPacket(pt, seq, ts & 0xFFFFFFFF, ssrc, payload, marker=marker)
        out.append((slot * PTIME_S, pkt.serialize()))
    return out


# --- pcap writing --------------------------------------------------------------------------


def _ipv4_checksum(header: bytes) -> int:
    total: int = sum(struct.unpack(f"!{len(header) // 2}H", header))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(src: tuple[str, int], dst: tuple[str, int], payload: bytes, ip_id: int = 0) -> bytes:
    """Ethernet II + IPv4 (RFC 791) + UDP (RFC 768, checksum 0 = none) around ``payload``."""
    udp_len = 8 + len(payload)
    udp = struct.pack("!HHHH", src[1], dst[1], udp_len, 0) + payload
    src_ip = bytes(int(o) for o in src[0].split("."))
    dst_ip = bytes(int(o) for o in dst[0].split("."))
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, ip_id & 0xFFFF, 0x4000, 64, 17, 0, src_ip, dst_ip
    )
    ip = ip[:10] + struct.pack("!H", _ipv4_checksum(ip)) + ip[12:]
    eth = b"\x02\x00\x00\x00\x00\x02" + b"\x02\x00\x00\x00\x00\x01" + b"\x08\x00"
    return eth + ip + udp


def write_pcap(
    path: str | Path,
    frames: Iterable[tuple[float, bytes]],
    *,
    linktype: int = LINKTYPE_ETHERNET,
    snaplen: int = 65535,
) -> int:
    """Write (absolute timestamp, frame) pairs as a classic µs pcap; returns frames written."""
    count = 0
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", _PCAP_MAGIC_US, 2, 4, 0, 0, snaplen, linktype))
        for ts, frame in frames:
            usec_total = int(round(ts * 1_000_000))
            sec, usec = divmod(usec_total, 1_000_000)
            f.write(struct.pack("<IIII", sec, usec, len(frame), len(frame)))
            f.write(frame)
            count += 1
    return count


def write_rtp_pcap(
    path: str | Path,
    packets: Iterable[tuple[float, bytes]],
    *,
    src: tuple[str, int] = ("127.0.0.1", 6000),
    dst: tuple[str, int] = ("127.0.0.1", 6000),
    epoch: float = DEFAULT_EPOCH,
) -> int:
    """Wrap (offset, RTP) pairs in Ethernet/IPv4/UDP and write them, paced from ``epoch``."""
    frames = (
        (epoch + offset, udp_frame(src, dst, rtp, ip_id=i))
        for i, (offset, rtp) in enumerate(packets)
    )
    return write_pcap(path, frames)


def make_rtp_pcap(
    path: str | Path,
    pcm: Int16Array,
    *,
    payload_type: int = PCMU,
    dtmf: Sequence[DtmfEvent] = (),
    dtmf_payload_type: int = TELEPHONE_EVENT,
    ssrc: int = 0x4B454655,
) -> float:
    """PCM (8 kHz) -> a replayable G.711 RTP pcap with DTMF; returns its length in seconds."""
    packets = rtp_packets_from_pcm(
        pcm, payload_type=payload_type, dtmf=dtmf, dtmf_payload_type=dtmf_payload_type, ssrc=ssrc
    )
    write_rtp_pcap(path, packets)
    return len(packets) * PTIME_S


# --- pcap reading --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capture:
    """The frames of one capture file and how to interpret them."""

    linktype: int
    """LINKTYPE_* of the (first) interface (tcpdump.org link-layer header types)."""
    frames: list[tuple[float, bytes]]
    """(arrival time in seconds since the epoch, captured bytes) in file order."""


def _read_classic(data: bytes) -> Capture:
    magic_le = struct.unpack_from("<I", data)[0]
    endian = "<" if magic_le in (_PCAP_MAGIC_US, _PCAP_MAGIC_NS) else ">"
    magic = struct.unpack_from(f"{endian}I", data)[0]
    if magic not in (_PCAP_MAGIC_US, _PCAP_MAGIC_NS):
        raise ValueError(f"not a pcap file (magic {magic_le:#010x})")
    divisor = 1e9 if magic == _PCAP_MAGIC_NS else 1e6
    linktype = struct.unpack_from(f"{endian}I", data, 20)[0] & 0x0FFFFFFF
    frames: list[tuple[float, bytes]] = []
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack_from(f"{endian}IIII", data, pos)
        pos += 16
        if pos + incl > len(data):
            raise ValueError(f"pcap record at byte {pos - 16} is truncated")
        frames.append((sec + frac / divisor, data[pos : pos + incl]))
        pos += incl
    return Capture(linktype, frames)


def _read_pcapng(data: bytes) -> Capture:
    frames: list[tuple[float, bytes]] = []
    links: list[tuple[int, float]] = []  # per interface: linktype, seconds per tick
    endian = "<"
    pos = 0
    while pos + 12 <= len(data):
        btype = struct.unpack_from(f"{endian}I", data, pos)[0]
        if btype == _PCAPNG_SHB:
            bom = data[pos + 8 : pos + 12]
            endian = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
            links = []
        blen = struct.unpack_from(f"{endian}I", data, pos + 4)[0]
        if blen < 12 or pos + blen > len(data):
            raise ValueError(f"pcapng block at byte {pos} has bad length {blen}")
        body = data[pos + 8 : pos + blen - 4]
        if btype == 1:  # Interface Description Block
            linktype = struct.unpack_from(f"{endian}H", body)[0]
            links.append((linktype, _if_tsresol(body[8:], endian)))
        elif btype == 6:  # Enhanced Packet Block
            ifid, hi, lo, caplen = struct.unpack_from(f"{endian}IIII", body)
            tick = links[ifid][1] if ifid < len(links) else 1e-6
            frames.append((((hi << 32) | lo) * tick, body[20 : 20 + caplen]))
        elif btype == 3:  # Simple Packet Block: no timestamp
            (orig,) = struct.unpack_from(f"{endian}I", body)
            frames.append((0.0, body[4 : 4 + orig]))
        pos += blen
    return Capture(links[0][0] if links else LINKTYPE_ETHERNET, frames)


def _if_tsresol(options: bytes, endian: str) -> float:
    pos = 0
    while pos + 4 <= len(options):
        code, length = struct.unpack_from(f"{endian}HH", options, pos)
        if code == 0:
            break
        if code == 9 and length >= 1:  # if_tsresol
            v = options[pos + 4]
            return float(2.0 ** -(v & 0x7F)) if v & 0x80 else float(10.0**-v)
        pos += 4 + (length + 3) // 4 * 4
    return 1e-6


def read_capture(path: str | Path) -> Capture:
    """Read a classic pcap or pcapng file."""
    data = Path(path).read_bytes()
    if len(data) < 24:
        raise ValueError(f"{path}: too short to be a capture ({len(data)} bytes)")
    if struct.unpack_from("<I", data)[0] == _PCAPNG_SHB:
        return _read_pcapng(data)
    return _read_classic(data)


def read_pcap(path: str | Path) -> list[tuple[float, bytes]]:
    """(timestamp, frame bytes) of every packet in a pcap/pcapng file."""
    return read_capture(path).frames


# --- test signal ---------------------------------------------------------------------------


def speech_like_pcm(seconds: float, rate: int = SAMPLE_RATE, *, seed: int = 7) -> Int16Array:
    """A deterministic, speech-like int16 signal with no repeating period.

    Syllables of 120-300 ms each glide their fundamental between 95 and 260 Hz with a few
    1/k-weighted harmonics, under a raised-cosine envelope; short pauses separate words. The
    irregular pattern keeps the autocorrelation single-peaked, so echo delay is unambiguous.
    """
    rng = np.random.default_rng(seed)
    n = int(round(seconds * rate))
    out = np.zeros(n, dtype=np.float64)
    pos = int(0.05 * rate)
    while pos < n:
        length = int(rng.uniform(0.12, 0.30) * rate)
        f0_a, f0_b = rng.uniform(95, 260, size=2)
        t = np.arange(length) / rate
        f0 = np.linspace(f0_a, f0_b, length)
        phase = 2 * np.pi * np.cumsum(f0) / rate
        tone = sum(np.sin(k * phase + rng.uniform(0, 2 * np.pi)) / k for k in range(1, 6))
        envelope = 0.5 - 0.5 * np.cos(2 * np.pi * t / t[-1]) if length > 1 else np.ones(1)
        seg = tone * envelope * rng.uniform(0.5, 1.0)
        end = min(n, pos + length)
        out[pos:end] += seg[: end - pos]
        pos = end + int(rng.choice([0.02, 0.04, 0.15, 0.3]) * rate)
    peak = float(np.max(np.abs(out))) or 1.0
    return (out / peak * 12000).astype(np.int16)


def make_speech_wav(path: str | Path, seconds: float, rate: int = SAMPLE_RATE) -> Path:
    """Write :func:`speech_like_pcm` as a mono 16-bit WAV; returns the path."""
    write_wav(path, speech_like_pcm(seconds, rate), rate)
    return Path(path)


def write_wav(path: str | Path, pcm: Int16Array, rate: int = SAMPLE_RATE) -> None:
    """Mono 16-bit little-endian WAV."""
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(np.asarray(pcm, dtype="<i2").tobytes())


def read_wav(path: str | Path) -> tuple[Int16Array, int]:
    """(mono int16 PCM, sample rate) of a 16-bit WAV; channels beyond the first are dropped."""
    with wave.open(str(path), "rb") as w:
        if w.getsampwidth() != 2:
            raise ValueError(f"{path}: only 16-bit WAV is supported, not {8 * w.getsampwidth()}")
        channels = w.getnchannels()
        data = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
        return data[::channels].astype(np.int16), w.getframerate()
