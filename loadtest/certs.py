"""Test certificates, made at run time (no private key is ever committed).

:func:`make_pki` writes under a folder: a CA, a server certificate for 127.0.0.1 signed by
it, a client certificate signed by it, an expired client certificate signed by it, and a
self-signed client certificate; each as ``NAME.pem`` + ``NAME.key``. EC P-256 keys: quick
to make, and what SBCs use today.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    folder: Path

    def cert(self, name: str) -> str:
        return str(self.folder / f"{name}.pem")

    def key(self, name: str) -> str:
        return str(self.folder / f"{name}.key")


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _write(
    folder: Path, name: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> None:
    (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
    *,
    ca: bool = False,
    server: bool = False,
    expired: bool = False,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    start, end = (now - datetime.timedelta(days=30), now - datetime.timedelta(days=1))
    if not expired:
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1)
    issuer_name, signer = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    elif not ca:
        builder = builder.add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    return builder.sign(signer, hashes.SHA256())


def make_pki(folder: Path) -> Pki:
    """CA ``ca``; ``server`` (127.0.0.1); clients ``client``, ``expired``, ``selfsigned``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    _write(folder, "ca", _cert("kefu test CA", ca_key, None, ca=True), ca_key)
    issuer = ("kefu test CA", ca_key)
    for name, kwargs in (
        ("server", {"server": True}),
        ("client", {}),
        ("expired", {"expired": True}),
    ):
        key = ec.generate_private_key(ec.SECP256R1())
        _write(folder, name, _cert(f"kefu {name}", key, issuer, **kwargs), key)
    key = ec.generate_private_key(ec.SECP256R1())
    _write(folder, "selfsigned", _cert("kefu selfsigned", key, None), key)
    return Pki(folder)
