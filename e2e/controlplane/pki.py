"""Fresh PKI for the local control plane: one CA, the API server's serving pair, client pairs
for the admin and the control-plane components, and the service-account signing key."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Pki", "issue_node_client", "make_pki"]

_VALID = dt.timedelta(days=2)  # a test cluster lives for minutes to hours


@dataclass(frozen=True)
class Pki:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(cn: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server_names: tuple[str, ...] = (),
    client: bool = False,
) -> x509.Certificate:
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + _VALID)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), True
        )
    else:
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if server_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
            sans: list[x509.GeneralName] = []
            for name in server_names:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(name)))
                except ValueError:
                    sans.append(x509.DNSName(name))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


# Client identities: file name → (user, group). Components authenticate as the users their
# default RBAC roles are bound to.
CLIENTS = {
    "admin": ("topoplace-e2e-admin", "system:masters"),
    "kube-scheduler": ("system:kube-scheduler", None),
    "kube-controller-manager": ("system:kube-controller-manager", None),
    "kube-apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
}
API_SERVER_NAMES = (
    "localhost",
    "127.0.0.1",
    "10.0.0.1",  # the first address of --service-cluster-ip-range: the `kubernetes` Service
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    pki = Pki(directory)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("topoplace-e2e-ca")
    ca = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.key("ca"), ca_key)

    def pair(name: str, subject: x509.Name, **kind: object) -> None:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = _issue(subject, key, ca_name, ca_key, **kind)  # type: ignore[arg-type]
        pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pki.key(name), key)

    pair("kube-apiserver", _name("kube-apiserver"), server_names=API_SERVER_NAMES)
    for name, (user, group) in CLIENTS.items():
        pair(name, _name(user, group), client=True)
    # Service-account tokens: RSA, as kube-apiserver and kube-controller-manager expect.
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(pki.key("service-account"), sa)
    pki.dir.joinpath("service-account.pub").write_bytes(
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return pki


def issue_node_client(pki: Pki, node: str) -> tuple[Path, Path]:
    """A kubelet's client pair: `system:node:<node>` in group `system:nodes`, so the Node
    authorizer and NodeRestriction treat it as that node and no other."""
    ca_key = serialization.load_pem_private_key(pki.key("ca").read_bytes(), password=None)
    ca_name = x509.load_pem_x509_certificate(pki.ca.read_bytes()).subject
    key = ec.generate_private_key(ec.SECP256R1())
    name = f"node-{node}"
    cert = _issue(_name(f"system:node:{node}", "system:nodes"), key, ca_name, ca_key, client=True)  # type: ignore[arg-type]
    pki.cert(name).write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pki.key(name), key)
    return pki.cert(name), pki.key(name)
