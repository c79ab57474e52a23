"""Configuration: a TOML file plus ``KEFU_*`` environment overrides, validated at start.

Every setting has a default that runs on one machine offline. A bad value fails start-up with
:class:`kefu.errors.ConfigError` whose ``key`` names the setting (``sip.listen``, ...).

Environment overrides use the dotted key upper-cased with ``_`` for ``.``, e.g.
``KEFU_SIP_LISTEN=0.0.0.0:5060`` or ``KEFU_CALLS_MAX_CONCURRENT=500``.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kefu.ai_bridge.listen.asr.language import LANGUAGE_MODES, check_language_map
from kefu.ai_bridge.settings import AiSettings
from kefu.cluster.settings import ClusterConfig, StateConfig, check_cluster
from kefu.errors import ConfigError
from kefu.mediaserver.tls import server_context
from kefu.mediaserver.trunk_config import TrunkConfig, check_trunk
from kefu.rtp.session import LATCHING_MODES, Latching
from kefu.signaling.api_access import TransferAllowList
from kefu.sip.offer_answer import SRTP_POLICIES, SrtpPolicy

MEDIA_MODES = ("echo", "prompt", "ai")
AVATAR_MODES = ("video", "weights", "off")
AVATAR_SIZES = ("512", "720p")


@dataclass(frozen=True, slots=True)
class HostPort:
    """A listen address ``HOST:PORT`` (IPv6 as ``[::1]:5060``)."""

    host: str
    port: int

    @classmethod
    def parse(cls, text: str, key: str) -> HostPort:
        host, sep, port_text = text.rpartition(":")
        if not sep or not host:
            raise ConfigError(f"{key}: expected HOST:PORT, got {text!r}", key=key)
        host = host.strip("[]")
        try:
            ipaddress.ip_address(host)
        except ValueError:
            if host != "localhost":
                raise ConfigError(
                    f"{key}: host must be an IP address, got {host!r}", key=key
                ) from None
            host = "127.0.0.1"
        port = _port(port_text, key, allow_zero=True)
        return cls(host, port)

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class SipConfig:
    listen: HostPort = HostPort("127.0.0.1", 5060)
    """Where the SIP trunk is served, on UDP and TCP alike."""
    public_address: str | None = None
    """Address written into Contact/SDP when it differs from the listen address (NAT)."""
    allow_from: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    """Trunk source networks (CIDR). Anything else gets 403, identical for every user."""
    auth_realm: str = "kefu"
    auth_users: Mapping[str, str] = field(default_factory=dict)
    """Trunk digest credentials (user -> password). Empty: no authentication."""
    auth_algorithm: str = "SHA-256"
    max_message_bytes: int = 65535
    """Largest SIP message (header block + body); a larger one gets 513 on UDP and closes
    its TCP connection."""
    tcp_max_connections: int = 1000
    """Open SIP-over-TCP connections, all sources together; beyond it new ones are closed."""
    tcp_max_connections_per_source: int = 100
    """Open SIP-over-TCP connections from one source IP; beyond it new ones are closed."""
    tcp_idle_timeout: float = 120.0
    """Close a TCP connection that carried no message or keep-alive for this long and that no
    call uses (seconds; 0: never)."""
    tcp_message_timeout: float = 10.0
    """Close a TCP connection whose started message is not complete after this long
    (slowloris; seconds; 0: no limit)."""
    rate_limit: float = 500.0
    """Messages per second one source IP may send, averaged (token bucket, checked before
    parsing; the excess is dropped); 0: no limit. A 100 calls/s trunk sends about 300."""
    rate_burst: float = 1000.0
    """Messages one source may send at once after being quiet."""
    rate_exempt: tuple[str, ...] = ()
    """Source networks (CIDR) exempt from rate_limit and calls.max_unacked_per_source."""
    session_expires: int = 1800
    """RFC 4028 session interval offered to the trunk (seconds); 0 disables session timers."""
    min_se: int = 90
    transfer_target: str | None = None
    """SIP URI of the call center's human queue, used by REFER (DTMF 0 or the HTTP API)."""
    transfer_digit: str | None = "0"
    """DTMF digit that asks for a human; None disables it."""
    tls_listen: HostPort | None = None
    """SIP over TLS (``sips:``, RFC 3261 §26.2) on this address, beside UDP/TCP; None: off.
    Needs ``tls_cert`` and ``tls_key``."""
    tls_cert: str | None = None
    """PEM certificate chain of the SIP-over-TLS listener."""
    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""
    tls_ca: str | None = None
    """PEM CA bundle that trunks' client certificates must chain to (``tls_verify_client``)."""
    tls_verify_client: bool = False
    """Require and verify a client certificate from every TLS trunk (mutual TLS)."""


@dataclass(frozen=True, slots=True)
class RtpConfig:
    ports: tuple[int, int] = (20000, 29999)
    """Inclusive port range for RTP (even) and RTCP (odd) sockets."""
    codecs: tuple[str, ...] = ("PCMU", "PCMA", "G722", "opus")
    """Codec preference order for answers (the offerer's order wins when honour_offer_order)."""
    honour_offer_order: bool = True
    srtp: SrtpPolicy = "optional"
    """SDES-SRTP on SIP legs (RFC 4568): ``optional`` answers RTP/SAVP offers with SRTP and
    RTP/AVP offers with plain RTP; ``required`` refuses plain offers (488) and kefu's own
    offers (delayed offer, outbound) are RTP/SAVP; ``off`` refuses RTP/SAVP (488)."""
    latching: Latching = "sdp_host"
    """Whose RTP a SIP leg accepts (kefu.rtp.session): ``sdp_host`` only the host the SDP
    named (any port); ``symmetric`` whoever sends first, from anywhere (callers whose SDP
    names a private address); ``strict`` only the exact SDP address and port."""


@dataclass(frozen=True, slots=True)
class CallsConfig:
    max_concurrent: int = 500
    max_unacked_per_source: int = 50
    """Calls from one source IP accepted but not yet ACKed (answer in progress, or 200 OK sent
    and no ACK yet); beyond it INVITEs get 503 and, for a second, are dropped unparsed. A
    trunk ACKs in milliseconds; a flood that never ACKs cannot hold every call slot. With
    ring_seconds, allow calls/s x ring_seconds. 0: no limit."""
    retry_after: int = 30
    """Seconds put in Retry-After with a 503 when full or draining."""
    drain_timeout: float = 60.0
    max_call_seconds: float = 0.0
    """kefu hangs up after this long (0: never)."""
    sip_room: str | None = None
    """Put every SIP call into this WebRTC room (role ``sip``) instead of echo/prompt/ai."""
    ring_seconds: float = 0.0
    """Send 180 Ringing and wait this long before answering (0: answer at once)."""
    media_mode: str = "ai"
    prompt_wav: str | None = None
    """WAV played first in ``prompt`` mode; a built-in tone is used when unset."""
    agent_wait_s: float = 60.0
    """A caller who asked for a human waits this long for an agent on the workbench (the AI
    keeps helping meanwhile), then is REFERred to ``sip.transfer_target`` if set. With no
    agent signed in the REFER is at once. 0: never wait."""
    agent_grace_s: float = 10.0
    """The agent holding a call vanished (browser closed, network lost): after this long with
    no agent in the call's room, the call goes back to the AI, which tells the caller."""
    record: bool = False
    """Record every phone call, both directions, as a stereo WAV (kefu.mediaserver.recording)."""
    record_trunks: tuple[str, ...] = ()
    """Record the phone calls of these trunks only (networks, e.g. ``10.0.0.0/24``, of the
    trunk's address: where an incoming INVITE came from, the outbound proxy or the called
    URI's host of an outbound call). ``record = true`` records every call anyway."""
    recordings_dir: str | None = None
    """Where recordings go (default: ``<state_dir>/recordings``); must be writable at start."""
    recording_retention_days: float = 30.0
    """Recordings older than this are deleted (checked hourly)."""
    transfer_allow: tuple[str, ...] = ()
    """Where ``POST /api/calls/{id}/transfer`` may REFER a caller: exact URIs
    (``sip:queue@vcc.example``, ``tel:+861012345``) or ``sip:*@HOST[:PORT]``; anything else
    gets 403. ``sip.transfer_target`` is always allowed (kefu.signaling.api_access)."""


@dataclass(frozen=True, slots=True)
class HttpConfig:
    listen: HostPort = HostPort("127.0.0.1", 8080)
    trusted_proxies: tuple[str, ...] = ()
    """Networks of reverse proxies (an ingress, a load balancer) whose ``X-Forwarded-For``
    names the client; empty: the peer's address is the client's."""
    tls_cert: str | None = None
    """PEM certificate chain: with ``tls_key`` the HTTP/WebSocket port serves HTTPS/WSS
    only; unset: plain HTTP (meant for loopback or behind a TLS-terminating ingress)."""
    tls_key: str | None = None
    """PEM private key of ``tls_cert``."""


@dataclass(frozen=True, slots=True)
class WebRtcConfig:
    ice_host_addresses: tuple[str, ...] = ()
    """Only these addresses become ICE host candidates (tests: 127.0.0.1); empty: all."""
    stun_urls: tuple[str, ...] = ()
    """Handed to clients and used by kefu's peers; empty: nothing public is contacted."""
    turn_urls: tuple[str, ...] = ()
    turn_secret: str | None = None
    """coturn ``static-auth-secret``: kefu mints time-limited TURN REST credentials."""
    turn_ttl_s: int = 86400
    max_participants_per_room: int = 16
    max_rooms: int = 200
    """Rooms on this node, all room workers together."""
    room_workers: int = 0
    """Processes hosting WebRTC rooms (one Python process uses one core); 0: one per CPU."""


@dataclass(frozen=True, slots=True)
class AuthConfig:
    jwt_secret: str | None = None
    """HS256 secret shared with ``kefu token``; unset: a random one kept in state_dir."""
    jwks_url: str | None = None
    """RS256 keys of a production identity provider."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    state_dir: str = "~/.local/state/kefu"
    """Where kefu keeps its development JWT secret, knowledge base and model caches."""


@dataclass(frozen=True, slots=True)
class PrivacyConfig:
    """Personal data at rest (kefu.privacy): the interaction log and call recordings."""

    mask: bool = True
    """Mask phone, card and ID numbers and e-mail addresses in the interaction log."""
    key_file: str | None = None
    """SM4 key (16 bytes, or 32 hex characters): seal the interaction log's lines and the
    recordings with it; None: written in the clear."""


@dataclass(frozen=True, slots=True)
class LogConfig:
    level: str = "info"
    json: bool = True


@dataclass(frozen=True, slots=True)
class Config:
    sip: SipConfig = field(default_factory=SipConfig)
    rtp: RtpConfig = field(default_factory=RtpConfig)
    calls: CallsConfig = field(default_factory=CallsConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    webrtc: WebRtcConfig = field(default_factory=WebRtcConfig)
    auth: AuthConfig = field(default_factory=AuthConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    ai: AiSettings = field(default_factory=AiSettings)
    log: LogConfig = field(default_factory=LogConfig)
    privacy: PrivacyConfig = field(default_factory=PrivacyConfig)
    state: StateConfig = field(default_factory=StateConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    trunk: TrunkConfig = field(default_factory=TrunkConfig)
    """Outbound calls (kefu.mediaserver.trunk_config)."""

    @property
    def state_path(self) -> Path:
        return Path(self.server.state_dir).expanduser()


def _port(value: Any, key: str, *, allow_zero: bool = False) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key}: port must be an integer, got {value!r}", key=key) from None
    if not (0 if allow_zero else 1) <= port <= 65535:
        raise ConfigError(f"{key}: port out of range: {port}", key=key)
    return port


def parse_port_range(text: str, key: str = "rtp.ports") -> tuple[int, int]:
    lo_text, sep, hi_text = str(text).partition("-")
    if not sep:
        raise ConfigError(f"{key}: expected LO-HI, got {text!r}", key=key)
    lo, hi = _port(lo_text, key), _port(hi_text, key)
    if hi - lo < 3:
        raise ConfigError(f"{key}: range {lo}-{hi} holds fewer than 2 RTP/RTCP pairs", key=key)
    return lo, hi


_OPTIONAL_ADDRESSES = frozenset({"sip.tls_listen"})
"""Listen addresses that are off (None) by default."""


def _coerce(key: str, current: Any, value: Any) -> Any:
    """Convert a TOML/env value to the type of the default it replaces."""
    if isinstance(current, HostPort) or key in _OPTIONAL_ADDRESSES:
        if key in _OPTIONAL_ADDRESSES and value in (None, ""):
            return None
        return HostPort.parse(str(value), key)
    if key == "rtp.ports":
        if isinstance(value, list | tuple) and len(value) == 2:
            return parse_port_range(f"{value[0]}-{value[1]}", key)
        return parse_port_range(str(value), key)
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if str(value).lower() in ("1", "true", "yes", "on"):
            return True
        if str(value).lower() in ("0", "false", "no", "off"):
            return False
        raise ConfigError(f"{key}: expected a boolean, got {value!r}", key=key)
    if isinstance(current, int | float) and not isinstance(current, bool):
        try:
            number = type(current)(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}", key=key) from None
        if number < 0:
            raise ConfigError(f"{key}: must not be negative, got {number}", key=key)
        return number
    if isinstance(current, tuple):
        items = value if isinstance(value, list | tuple) else str(value).split(",")
        return tuple(str(v).strip() for v in items if str(v).strip())
    if isinstance(current, Mapping):
        if isinstance(value, Mapping):
            return {str(k): str(v) for k, v in value.items()}
        pairs = [p.partition(":") for p in str(value).split(",") if p]
        return {u: pw for u, _, pw in pairs}
    if value is None or isinstance(value, str):
        return value
    if current is None:
        return str(value)
    raise ConfigError(f"{key}: unexpected value {value!r}", key=key)


def _apply(section: Any, prefix: str, values: Mapping[str, Any]) -> Any:
    known = {f.name: f for f in fields(section)}
    changes: dict[str, Any] = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else name
        if name not in known:
            raise ConfigError(f"unknown setting {key!r}", key=key)
        current = getattr(section, name)
        if hasattr(current, "__dataclass_fields__") and not isinstance(current, HostPort):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{key}: expected a table", key=key)
            changes[name] = _apply(current, key, value)
        else:
            changes[name] = _coerce(key, current, value)
    return replace(section, **changes)


def _env_overrides(config: Config, environ: Mapping[str, str]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for section in fields(config):
        for item in fields(getattr(config, section.name)):
            env = f"KEFU_{section.name}_{item.name}".upper()
            if env in environ:
                tree.setdefault(section.name, {})[item.name] = environ[env]
    return tree


def _check_tls(config: Config) -> None:
    """Every TLS file loads at start (kefu.mediaserver.tls raises a ConfigError naming it)."""
    sip, http = config.sip, config.http
    if sip.tls_listen is not None:
        if not sip.tls_cert or not sip.tls_key:
            raise ConfigError(
                "sip.tls_listen needs sip.tls_cert and sip.tls_key", key="sip.tls_cert"
            )
        server_context(
            sip.tls_cert,
            sip.tls_key,
            section="sip",
            ca=sip.tls_ca,
            verify_client=sip.tls_verify_client,
        )
    if bool(http.tls_cert) != bool(http.tls_key):
        raise ConfigError("http.tls_cert and http.tls_key go together", key="http.tls_cert")
    if http.tls_cert and http.tls_key:
        server_context(http.tls_cert, http.tls_key, section="http")


def _validate(config: Config) -> Config:
    if config.calls.media_mode not in MEDIA_MODES:
        raise ConfigError(
            f"calls.media_mode must be one of {', '.join(MEDIA_MODES)}, "
            f"got {config.calls.media_mode!r}",
            key="calls.media_mode",
        )
    if config.ai.language not in LANGUAGE_MODES:
        raise ConfigError(
            f"ai.language must be en, zh or auto, got {config.ai.language!r}", key="ai.language"
        )
    for name in ("language_by_number", "language_by_trunk", "language_by_room"):
        key = f"ai.{name}"
        problem = check_language_map(
            getattr(config.ai, name), key, networks=name == "language_by_trunk"
        )
        if problem:
            raise ConfigError(problem, key=key)
    if config.ai.avatar not in AVATAR_MODES:
        raise ConfigError(
            f"ai.avatar must be one of {', '.join(AVATAR_MODES)}, got {config.ai.avatar!r}",
            key="ai.avatar",
        )
    if config.ai.avatar_size not in AVATAR_SIZES:
        raise ConfigError(
            f"ai.avatar_size must be 512 or 720p, got {config.ai.avatar_size!r}",
            key="ai.avatar_size",
        )
    if not 1 <= config.ai.avatar_fps <= 60:
        raise ConfigError("ai.avatar_fps must be between 1 and 60", key="ai.avatar_fps")
    if config.rtp.latching not in LATCHING_MODES:
        raise ConfigError(
            f"rtp.latching must be one of {', '.join(LATCHING_MODES)}, got {config.rtp.latching!r}",
            key="rtp.latching",
        )
    _check_tls(config)
    if config.rtp.srtp not in SRTP_POLICIES:
        raise ConfigError(
            f"rtp.srtp must be one of {', '.join(SRTP_POLICIES)}, got {config.rtp.srtp!r}",
            key="rtp.srtp",
        )
    if config.calls.max_concurrent < 1:
        raise ConfigError("calls.max_concurrent must be at least 1", key="calls.max_concurrent")
    _check_networks(config.sip.allow_from, "sip.allow_from")
    _check_networks(config.sip.rate_exempt, "sip.rate_exempt")
    _check_networks(config.calls.record_trunks, "calls.record_trunks")
    if config.sip.rate_limit > 0 and config.sip.rate_burst < 1:
        raise ConfigError("sip.rate_burst must be at least 1", key="sip.rate_burst")
    if config.sip.max_message_bytes < 1024:
        raise ConfigError(
            "sip.max_message_bytes must be at least 1024", key="sip.max_message_bytes"
        )
    if config.sip.auth_algorithm not in ("MD5", "SHA-256"):
        raise ConfigError("sip.auth_algorithm must be MD5 or SHA-256", key="sip.auth_algorithm")
    if config.log.level.lower() not in ("debug", "info", "warning", "error"):
        raise ConfigError(f"log.level: unknown level {config.log.level!r}", key="log.level")
    if config.calls.recording_retention_days <= 0:
        raise ConfigError(
            "calls.recording_retention_days must be above 0",
            key="calls.recording_retention_days",
        )
    if config.webrtc.room_workers < 0:
        raise ConfigError(
            "webrtc.room_workers must be 0 (one per CPU) or more", key="webrtc.room_workers"
        )
    for address in config.webrtc.ice_host_addresses:
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ConfigError(
                f"webrtc.ice_host_addresses: not an IP address: {address!r}",
                key="webrtc.ice_host_addresses",
            ) from None
    try:
        TransferAllowList(config.calls.transfer_allow)
    except ValueError as exc:
        raise ConfigError(f"calls.transfer_allow: {exc}", key="calls.transfer_allow") from None
    _check_networks(config.http.trusted_proxies, "http.trusted_proxies")
    cluster_problem = check_cluster(config.state, config.cluster)
    if cluster_problem is not None:
        raise ConfigError(cluster_problem[1], key=cluster_problem[0])
    trunk_problem = check_trunk(config.trunk)
    if trunk_problem is not None:
        raise ConfigError(trunk_problem[1], key=trunk_problem[0])
    if config.calls.prompt_wav and not Path(config.calls.prompt_wav).is_file():
        raise ConfigError(
            f"calls.prompt_wav: no such file {config.calls.prompt_wav!r}", key="calls.prompt_wav"
        )
    return config


def _check_networks(values: tuple[str, ...], key: str) -> None:
    for net in values:
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise ConfigError(f"{key}: not a network: {net!r}", key=key) from None


def jwt_secret(config: Config) -> str:
    """The configured HS256 secret, or this installation's own random one (created once)."""
    if config.auth.jwt_secret:
        return config.auth.jwt_secret
    path = config.state_path / "jwt-secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    return secret


def load_config(
    path: str | Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> Config:
    """Defaults, then the TOML file, then ``KEFU_*`` variables, then command-line overrides."""
    config = Config()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}", key="--config") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}", key="--config") from exc
        config = _apply(config, "", data)
    config = _apply(config, "", _env_overrides(config, os.environ if environ is None else environ))
    if overrides:
        config = _apply(config, "", overrides)
    return _validate(config)
