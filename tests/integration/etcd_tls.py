"""TLS material for throwaway etcd servers: a CA, a server and a client certificate."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pyflannel_lab.etcd_server import EtcdTLS


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)
    return str(path)


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _issue(
    subject: str | x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usages: list[x509.ObjectIdentifier],
    sans: list[x509.GeneralName],
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = (
        subject
        if isinstance(subject, x509.Name)
        else x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_tls_material(directory: Path, host: str = "127.0.0.1") -> EtcdTLS:
    """A throwaway CA with a server certificate for ``host`` and a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("pyft-ca", ca_key, None, ca_key, [], [])
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue(
        "pyft-etcd",
        server_key,
        ca,
        ca_key,
        [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH],
        [x509.IPAddress(ipaddress.ip_address(host)), x509.DNSName("localhost")],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue("pyft-client", client_key, ca, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    # Kept for gateway_client: throwaway test material only.
    _write_key(directory / "ca-key.pem", ca_key)
    return EtcdTLS(
        ca_file=_write_cert(directory / "ca.pem", ca),
        server_cert=_write_cert(directory / "server.pem", server),
        server_key=_write_key(directory / "server-key.pem", server_key),
        client_cert=_write_cert(directory / "client.pem", client),
        client_key=_write_key(directory / "client-key.pem", client_key),
    )


def gateway_client(directory: Path, tls: EtcdTLS) -> tuple[str, str]:
    """A client certificate with no common name, from the same CA: with authentication on,
    etcd's JSON gateway refuses a client whose certificate names one ("CommonName of client
    sending a request against gateway will be ignored"), so its clients present a subject
    without it and a user's token. Returns (certificate, key) paths."""
    ca = x509.load_pem_x509_certificate(Path(tls.ca_file).read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca-key.pem").read_bytes(), None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "pyflannel")])
    cert = _issue(subject, key, ca, ca_key, [ExtendedKeyUsageOID.CLIENT_AUTH], [])
    return (
        _write_cert(directory / "gateway-client.pem", cert),
        _write_key(directory / "gateway-client-key.pem", key),
    )
