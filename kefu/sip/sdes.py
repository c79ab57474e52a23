"""SDP Security Descriptions for media streams: the ``a=crypto`` attribute (RFC 4568).

SDES carries the SRTP master key and salt in the SDP itself, so it is only as secret as the
signalling: use it over SIP/TLS (``sips:``), as RFC 4568 §8.3 requires. kefu supports the
two suites every SIP phone and SBC speaks (RFC 4568 §6.2):

* ``AES_CM_128_HMAC_SHA1_80`` — AES-128 counter mode, 80-bit HMAC-SHA1 tag (the default);
* ``AES_CM_128_HMAC_SHA1_32`` — the same with a 32-bit tag on SRTP (SRTCP keeps 80).

Each takes a 30-byte key (16-byte master key || 14-byte master salt), written base64 after
``inline:``. One line looks like::

    a=crypto:1 AES_CM_128_HMAC_SHA1_80 inline:PS1uQCVeeCFCanVmcjkpPywjNWhcYD0mXXtxaVBR|2^20|1:4

Pure and synchronous: :meth:`CryptoAttribute.parse` raises :class:`ValueError` with a
specific message; :meth:`CryptoAttribute.serialize` is its inverse (golden-file tested). The
randomness of a new key comes from the caller (:func:`new_key`), so answers are testable.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from dataclasses import dataclass

SUITES: tuple[str, ...] = ("AES_CM_128_HMAC_SHA1_80", "AES_CM_128_HMAC_SHA1_32")
"""Supported crypto suites, kefu's preference first (RFC 4568 §6.2.1, §6.2.2)."""
KEY_LENGTH = 30
"""Master key (16) + master salt (14) octets of both suites (RFC 4568 §6.2.1)."""
SAFE_SESSION_PARAMS = frozenset({"WSH"})
"""Session parameters that change nothing kefu must do (RFC 4568 §6.3.7: a window-size
hint). Any other (UNENCRYPTED_SRTP, KDR, FEC_ORDER...) makes a line unusable for kefu."""


def new_key() -> bytes:
    """A fresh random master key || salt for one direction of one stream."""
    return secrets.token_bytes(KEY_LENGTH)


def new_offer_keys() -> list[bytes]:
    """Fresh keys for an offer: one per supported suite (:func:`offer_lines`)."""
    return [new_key() for _ in SUITES]


@dataclass(frozen=True, slots=True)
class CryptoAttribute:
    """One ``a=crypto`` line's value (RFC 4568 §9.1 grammar)."""

    tag: int
    """Decimal tag, 1..999999999: the answer repeats the offered line's (RFC 4568 §9.1)."""
    suite: str
    """Crypto suite name, e.g. ``AES_CM_128_HMAC_SHA1_80`` (RFC 4568 §6.2)."""
    key: bytes
    """Master key || master salt from the first ``inline:`` key parameter (§6.1)."""
    lifetime: str | None = None
    """Master key lifetime as written (``2^31`` or a decimal), if any (§6.1)."""
    mki: str | None = None
    """``MKI-value:MKI-length`` as written, if any (§6.1); kefu does not use MKIs."""
    extra_keys: int = 0
    """How many further key parameters (``;inline:...``) followed the first (§9.1)."""
    session_params: tuple[str, ...] = ()
    """Session parameters as written (§6.3), e.g. ``WSH=64``."""

    @classmethod
    def parse(cls, value: str) -> CryptoAttribute:
        """Parse the value of an ``a=crypto:`` attribute (everything after the colon)."""
        fields = value.split()
        if len(fields) < 3:
            raise ValueError(f"crypto attribute needs a tag, a suite and keys: {value!r}")
        tag_text, suite, key_params, *params = fields
        if not tag_text.isdigit() or len(tag_text) > 9:
            raise ValueError(f"crypto tag must be 1-9 digits, got {tag_text!r}")
        if not suite or not all(c.isalnum() or c == "_" for c in suite):
            raise ValueError(f"bad crypto suite name {suite!r}")
        first, *others = key_params.split(";")
        method, colon, info = first.partition(":")
        if not colon or method != "inline":
            raise ValueError(f"key method must be inline, got {first[:20]!r}")
        key_text, *rest = info.split("|")
        if len(rest) > 2:
            raise ValueError("key parameter has more than a lifetime and an MKI")
        try:
            key = base64.b64decode(key_text, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("inline key is not valid base64") from None
        lifetime = mki = None
        for part in rest:
            if ":" in part:
                mki = part
            else:
                lifetime = part
        if suite in SUITES and len(key) != KEY_LENGTH:
            raise ValueError(f"{suite} needs a {KEY_LENGTH}-byte key||salt, got {len(key)}")
        return cls(int(tag_text), suite, key, lifetime, mki, len(others), tuple(params))

    def serialize(self) -> str:
        key = "inline:" + base64.b64encode(self.key).decode("ascii")
        for part in (self.lifetime, self.mki):
            if part is not None:
                key += f"|{part}"
        return " ".join((str(self.tag), self.suite, key, *self.session_params))

    def __str__(self) -> str:
        return self.serialize()

    @property
    def usable(self) -> bool:
        """kefu can run SRTP with this line: a supported suite, one key without MKI, no
        session parameter that changes the protocol (RFC 4568 §7.1.1: skip the others)."""
        names = {param.split("=", 1)[0] for param in self.session_params}
        return (
            self.suite in SUITES
            and self.mki is None
            and self.extra_keys == 0
            and names <= SAFE_SESSION_PARAMS
        )


@dataclass(frozen=True, slots=True)
class SrtpKeys:
    """The SRTP keys of one negotiated stream, from kefu's point of view (RFC 4568 §7)."""

    suite: str
    """The crypto suite both sides use (one of :data:`SUITES`)."""
    local_key: bytes
    """What kefu protects its RTP/RTCP with: the key in kefu's own ``a=crypto``."""
    remote_key: bytes
    """What the peer protects with: the key in the peer's ``a=crypto``."""
    tag: int
    """The tag of the crypto line both descriptions share."""

    def __repr__(self) -> str:  # keys never reach a log line
        return f"SrtpKeys(suite={self.suite!r}, tag={self.tag})"


def crypto_lines(values: list[str]) -> tuple[list[CryptoAttribute], list[str]]:
    """Parse every ``a=crypto`` value; (the parsed ones, why each other one failed)."""
    parsed: list[CryptoAttribute] = []
    problems: list[str] = []
    for value in values:
        try:
            parsed.append(CryptoAttribute.parse(value))
        except ValueError as exc:
            problems.append(str(exc))
    return parsed, problems


def choose(offered: list[CryptoAttribute]) -> CryptoAttribute | None:
    """The first usable line of an offer, in the offerer's order (RFC 4568 §7.1.1)."""
    for line in offered:
        if line.usable:
            return line
    return None


def offer_lines(keys: list[bytes]) -> list[CryptoAttribute]:
    """kefu's offered lines: one per supported suite, tags 1, 2..., each with its own key."""
    pairs = zip(SUITES, keys, strict=True)
    return [CryptoAttribute(tag, suite, key) for tag, (suite, key) in enumerate(pairs, 1)]


def answer_keys(theirs: CryptoAttribute, before: SrtpKeys | None, key: bytes | None) -> SrtpKeys:
    """kefu's keys when it answers ``theirs``: its own ``key``, else the one it already uses
    on this stream (``before``, same suite: a refresh re-INVITE is not a re-key), else a
    new random one (RFC 4568 §7.1.2, §7.1.4)."""
    if key is None:
        same = before is not None and before.suite == theirs.suite
        key = before.local_key if before is not None and same else new_key()
    if len(key) != KEY_LENGTH:
        raise ValueError(f"an SRTP key||salt is {KEY_LENGTH} bytes, got {len(key)}")
    return SrtpKeys(theirs.suite, key, theirs.key, theirs.tag)


def answered_keys(offered: list[str], answered: list[str]) -> SrtpKeys | None:
    """The keys of an answer to kefu's offer: its crypto line must repeat the tag and suite
    of a line kefu offered (RFC 4568 §7.1.2); None when none does."""
    ours, _ = crypto_lines(offered)
    theirs, _ = crypto_lines(answered)
    for line in theirs:
        for mine in ours:
            if line.tag == mine.tag and line.suite == mine.suite and line.usable:
                return SrtpKeys(line.suite, mine.key, line.key, line.tag)
    return None
