"""TLS server contexts for the SIP-over-TLS listener and the HTTPS/WebSocket port.

One builder for both (``[sip] tls_*``, ``[http] tls_*``): TLS 1.2 at least (1.3 preferred by
OpenSSL), the certificate chain and key from PEM files, and optionally a CA whose
certificates clients must present (``sip.tls_verify_client``). A file that is missing or
does not load is a :class:`~kefu.errors.ConfigError` naming its setting, at start.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from kefu.errors import ConfigError

__all__ = ["server_context"]


def server_context(
    cert: str,
    key: str,
    *,
    section: str,
    ca: str | None = None,
    verify_client: bool = False,
) -> ssl.SSLContext:
    """A server-side context; ``section`` (``sip``, ``http``) names the settings in errors."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    for name, path in (("tls_cert", cert), ("tls_key", key)):
        if not Path(path).is_file():
            raise ConfigError(f"{section}.{name}: no such file {path!r}", key=f"{section}.{name}")
    try:
        context.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            f"{section}.tls_cert/tls_key: cannot load the certificate and key: {exc}",
            key=f"{section}.tls_cert",
        ) from None
    if ca:
        if not Path(ca).is_file():
            raise ConfigError(f"{section}.tls_ca: no such file {ca!r}", key=f"{section}.tls_ca")
        try:
            context.load_verify_locations(cafile=ca)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError(
                f"{section}.tls_ca: cannot load {ca!r}: {exc}", key=f"{section}.tls_ca"
            ) from None
    if verify_client:
        if not ca:
            raise ConfigError(
                f"{section}.tls_verify_client needs {section}.tls_ca (the CA clients' "
                "certificates must chain to)",
                key=f"{section}.tls_ca",
            )
        context.verify_mode = ssl.CERT_REQUIRED
    return context
