"""Certificates made in the test with `cryptography`: a CA, server certificates for
127.0.0.1/localhost, and client certificates, each with the SANs the test asks for.

Import it after `require_module("cryptography")` (tests/web/conftest.py does), so that a
checkout without the package skips locally and fails in CI instead of failing to collect."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes
    serial: int

    def write(self, folder: Path, name: str) -> tuple[Path, Path]:
        """`name`.crt and `name`.key in `folder`."""
        cert, key = folder / f"{name}.crt", folder / f"{name}.key"
        cert.write_bytes(self.cert_pem)
        key.write_bytes(self.key_pem)
        return cert, key


class Authority:
    """A self-signed CA that issues server and client certificates."""

    def __init__(self, name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        now = _now()
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name).issuer_name(self.name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
            .sign(self.key, hashes.SHA256())
        )

    @property
    def pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def write(self, folder: Path, name: str) -> Path:
        path = folder / f"{name}.crt"
        path.write_bytes(self.pem)
        return path

    def server(self, common_name: str = "localhost", *more_ips: str) -> Issued:
        """A server certificate for localhost and 127.0.0.1, and `more_ips` (the address a
        container reaches a server of the host at)."""
        ips = ("127.0.0.1", *more_ips)
        return self._issue(common_name, [x509.DNSName("localhost"),
                                         *(x509.IPAddress(ipaddress.ip_address(ip))
                                           for ip in ips)],
                           ExtendedKeyUsageOID.SERVER_AUTH)

    def client(self, *dns_names: str) -> Issued:
        return self._issue(dns_names[0] if dns_names else "client",
                           [x509.DNSName(n) for n in dns_names],
                           ExtendedKeyUsageOID.CLIENT_AUTH)

    def _issue(self, common_name: str, sans: list[x509.GeneralName],
               usage: x509.ObjectIdentifier) -> Issued:
        key = ec.generate_private_key(ec.SECP256R1())
        now = _now()
        serial = x509.random_serial_number()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.name).public_key(key.public_key()).serial_number(serial)
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(
            cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()),
            serial)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
