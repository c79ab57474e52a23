"""One place to look codecs up by SDP name and build their encoders and decoders."""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from kefu.codecs.g711 import G711Decoder, G711Encoder
from kefu.codecs.g722 import G722Decoder, G722Encoder
from kefu.codecs.info import SUPPORTED_AUDIO, CodecInfo, FrameSizeError, codec_info
from kefu.codecs.opus import OpusDecoder, OpusEncoder
from kefu.errors import CodecError

__all__ = [
    "SUPPORTED_AUDIO",
    "CodecInfo",
    "Decoder",
    "Encoder",
    "FrameSizeError",
    "codec_info",
    "make_decoder",
    "make_encoder",
]


class Encoder(Protocol):
    """Turns one frame of mono int16 PCM at ``info.sample_rate`` into one RTP payload."""

    info: CodecInfo

    def encode(self, pcm: NDArray[np.int16]) -> bytes: ...


class Decoder(Protocol):
    """Turns RTP payloads back into mono int16 PCM at ``info.sample_rate``."""

    info: CodecInfo

    def decode(self, payload: bytes) -> NDArray[np.int16]: ...

    def conceal(self, samples: int) -> NDArray[np.int16]:
        """Audio standing in for one lost frame of ``samples`` samples."""
        ...


def make_encoder(name: str, **opts: Any) -> Encoder:
    """An encoder for the codec called ``name`` in SDP.

    Options: ``ptime_ms`` (all codecs, default 20); for opus also ``bitrate`` (default 32000),
    ``channels`` (1 or 2 input channels, default 1) and ``fec`` (in-band FEC, default off).
    """
    info = codec_info(name)
    if info.name in ("PCMU", "PCMA"):
        return G711Encoder(info.name, **opts)
    if info.name == "G722":
        return G722Encoder(**opts)
    if info.name == "opus":
        return OpusEncoder(**opts)
    raise CodecError(f"{info.name} is not an audio codec kefu can encode")


def make_decoder(name: str) -> Decoder:
    """A decoder (with packet-loss concealment) for the codec called ``name`` in SDP."""
    info = codec_info(name)
    if info.name in ("PCMU", "PCMA"):
        return G711Decoder(info.name)
    if info.name == "G722":
        return G722Decoder()
    if info.name == "opus":
        return OpusDecoder()
    raise CodecError(f"{info.name} is not an audio codec kefu can decode")
