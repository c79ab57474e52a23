"""kefu.rtp — the RTP media plane of a SIP leg.

Sans-IO (no sockets, no asyncio): ``packet`` (RTP, RFC 3550 §5), ``rtcp`` (RFC 3550 §6),
``reception`` (A.1/A.3/A.8 statistics), ``session`` (latching, sequencing, RTCP timers),
``ports`` (RTP/RTCP port pairs). I/O and media: ``aio`` (RtpEndpoint, the only module doing
I/O) and ``track`` (aiortc tracks); import those explicitly, they pull in aiortc and PyAV.
"""

from kefu.rtp.packet import RtpExtension, RtpPacket, is_rtcp
from kefu.rtp.ports import PortAllocator
from kefu.rtp.session import (
    AudioPacket,
    DtmfReceived,
    RtcpReceived,
    RtpEvent,
    RtpSession,
    RtpStats,
    SourceLatched,
)

__all__ = [
    "AudioPacket",
    "DtmfReceived",
    "PortAllocator",
    "RtcpReceived",
    "RtpEvent",
    "RtpExtension",
    "RtpPacket",
    "RtpSession",
    "RtpStats",
    "SourceLatched",
    "is_rtcp",
]
