"""Certificates of a gnomon cluster: one cluster CA, one certificate per node (node/raft/DESIGN.md).

A node's certificate names the node by a URI subject-alternative name
``urn:gnomon:node:<node_id>`` (its identity on the Raft port: ports are not part of an X.509
name, and several nodes may share a host), and its hosts as IP/DNS names (for clients of the
gRPC port, which verify host names as usual). It carries both serverAuth and clientAuth:
every node accepts and dials.

Two halves: loading and checking configured files into `ssl` contexts (`load_peer_tls`), and
generating a throwaway CA and node certificates for `gnomon dev`, `LocalCluster` and the
jepsen harness (`ensure_cluster_files`, reused across restarts, private keys 0600).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = [
    "CertificateAuthority", "NODE_URI_PREFIX", "NodeFiles", "PeerTls", "TlsError",
    "ensure_cluster_files", "issue", "load_peer_tls", "new_ca", "node_uri", "peer_node_ids",
    "write_cert", "write_key",
]

NODE_URI_PREFIX = "urn:gnomon:node:"
CA_DAYS = 3650
NODE_DAYS = 365
# A generated certificate closer than this to its end is issued again at the next start.
RENEW_BEFORE = dt.timedelta(days=7)
# Valid from this long before they are made: clocks of peers differ, and the jepsen harness
# moves node clocks back by minutes to hours.
BACKDATE = dt.timedelta(days=2)


class TlsError(ValueError):
    """A TLS file is missing, unreadable or breaks a rule; the message names the setting."""


def node_uri(node_id: str) -> str:
    """The URI SAN that names a node."""
    return NODE_URI_PREFIX + node_id


def peer_node_ids(peercert: Mapping | None) -> list[str]:
    """The node ids a verified peer certificate names (`ssl.SSLObject.getpeercert()`)."""
    if not peercert:
        return []
    return [value[len(NODE_URI_PREFIX):] for kind, value in peercert.get("subjectAltName", ())
            if kind == "URI" and value.startswith(NODE_URI_PREFIX)]


# -- configured files -> ssl contexts -----------------------------------------------------


@dataclass(frozen=True)
class PeerTls:
    """The Raft port's TLS: contexts for accepting and dialing, and what the cert says."""

    server: ssl.SSLContext
    client: ssl.SSLContext
    node_id: str
    not_after: dt.datetime
    cert_path: str
    ca_path: str


def _context(server: bool, cert: str, key: str, ca: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2  # 1.3 is negotiated between gnomon nodes
    if not server:
        # The peer's identity is its node URI, checked by the transport against the member
        # it dialed; host names would not tell apart nodes that share a host.
        ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        ctx.load_cert_chain(cert, key)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"raft_tls_key: {key!r} cannot be used with raft_tls_cert {cert!r} "
                       f"({getattr(exc, 'reason', None) or exc})") from None
    try:
        ctx.load_verify_locations(cafile=ca)
    except (ssl.SSLError, OSError) as exc:
        raise TlsError(f"raft_tls_ca: {ca!r} is not a PEM CA certificate "
                       f"({getattr(exc, 'reason', None) or exc})") from None
    if server:
        ctx.num_tickets = 0  # no resumption: every connection presents its certificate
    return ctx


def load_peer_tls(cert: str, key: str, ca: str, node_id: str, *,
                  now: dt.datetime | None = None) -> PeerTls:
    """Contexts for the Raft port from the configured files, after checking that the
    certificate names `node_id`, is valid now, matches the key and is accepted by the CA
    (an in-memory handshake of the node with itself, so the check is the one peers make)."""
    for name, path in (("raft_tls_cert", cert), ("raft_tls_key", key), ("raft_tls_ca", ca)):
        if not os.path.isfile(path):
            raise TlsError(f"{name}: {path!r} is not a readable file")
    try:
        leaf = x509.load_pem_x509_certificate(Path(cert).read_bytes())
    except (OSError, ValueError) as exc:
        raise TlsError(f"raft_tls_cert: {cert!r} is not a PEM certificate ({exc})") from None
    named = _cert_node_ids(leaf)
    if named != [node_id]:
        raise TlsError(
            f"raft_tls_cert: {cert!r} must name exactly this node by the subject alternative "
            f"name URI {node_uri(node_id)!r}; it names {named or 'no node'}")
    now = now or dt.datetime.now(dt.UTC)
    if leaf.not_valid_after_utc <= now:
        raise TlsError(f"raft_tls_cert: {cert!r} expired on {leaf.not_valid_after_utc:%Y-%m-%d}")
    if leaf.not_valid_before_utc > now:
        raise TlsError(f"raft_tls_cert: {cert!r} is valid only from "
                       f"{leaf.not_valid_before_utc:%Y-%m-%d %H:%M} UTC (check the clock)")
    server = _context(True, cert, key, ca)
    client = _context(False, cert, key, ca)
    problem = _self_handshake(server, client)
    if problem:
        raise TlsError(f"raft_tls_cert: {cert!r} is not accepted by the CA in raft_tls_ca "
                       f"{ca!r}: {problem}")
    return PeerTls(server, client, node_id, leaf.not_valid_after_utc, cert, ca)


def _self_handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> str:
    """'' when a node holding these contexts accepts itself as a peer, else OpenSSL's reason."""
    s_in, s_out, c_in, c_out = (ssl.MemoryBIO() for _ in range(4))
    s = server.wrap_bio(s_in, s_out, server_side=True)
    c = client.wrap_bio(c_in, c_out, server_side=False)
    done = {"s": False, "c": False}
    for _ in range(10):
        for name, obj in (("c", c), ("s", s)):
            if done[name]:
                continue
            try:
                obj.do_handshake()
                done[name] = True
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                return exc.reason or str(exc)
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if done["s"] and done["c"]:
            try:  # TLS 1.3: the server verifies the client's certificate after its Finished
                s.read(1)
            except ssl.SSLWantReadError:
                return ""
            except ssl.SSLError as exc:
                return exc.reason or str(exc)
            return ""
    return "the handshake did not complete"


def _cert_node_ids(cert: x509.Certificate) -> list[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [u[len(NODE_URI_PREFIX):] for u in san.get_values_for_type(x509.UniformResourceIdentifier)
            if u.startswith(NODE_URI_PREFIX)]


# -- generation (dev, tests, jepsen) ------------------------------------------------------


@dataclass(frozen=True)
class CertificateAuthority:
    """A CA certificate with its private key (it signs node and client certificates)."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def new_ca(common_name: str = "gnomon cluster CA", *, days: int = CA_DAYS) -> CertificateAuthority:
    """A fresh self-signed CA (ECDSA P-256) that may sign end-entity certificates only."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gnomon"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(cert, key)


def issue(ca: CertificateAuthority, common_name: str, *, node_id: str | None = None,
          hosts: Iterable[str] = (), server: bool = True, client: bool = True,
          days: int = NODE_DAYS, not_before: dt.datetime | None = None,
          not_after: dt.datetime | None = None) -> tuple[x509.Certificate,
                                                         ec.EllipticCurvePrivateKey]:
    """A certificate signed by `ca`: naming `node_id` (URI SAN) when given and `hosts` (IP or
    DNS SANs), for TLS servers and/or clients. Client certificates for other uses (the CLI,
    workers) come from the same function."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    start = not_before or now - BACKDATE
    names: list[x509.GeneralName] = []
    if node_id is not None:
        names.append(x509.UniformResourceIdentifier(node_uri(node_id)))
    for host in dict.fromkeys(hosts):
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + \
        ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "gnomon"),
                                 x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca.cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(not_after or start + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=False, crl_sign=False,
            content_commitment=False, key_encipherment=False, data_encipherment=False,
            key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()),
                       critical=False)
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    return builder.sign(ca.key, hashes.SHA256()), key


def write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    """Write a private key (PEM, unencrypted) readable by its owner only (0600), atomically."""
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    _write_atomic(path, data, 0o600)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    """Write a certificate (PEM), atomically."""
    _write_atomic(path, cert.public_bytes(serialization.Encoding.PEM), 0o644)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # an older tmp file keeps its mode through O_CREAT
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


@dataclass(frozen=True)
class NodeFiles:
    """The three files one node is configured with (raft_tls_cert, raft_tls_key, raft_tls_ca)."""

    cert: Path
    key: Path
    ca: Path

    def flags(self) -> list[str]:
        """The node's command-line flags for them (paths, never key material)."""
        return ["--raft-tls-cert", str(self.cert), "--raft-tls-key", str(self.key),
                "--raft-tls-ca", str(self.ca)]


def ensure_cluster_files(directory: Path, nodes: Mapping[str, Sequence[str]], *,
                         common_name: str = "gnomon dev cluster CA") -> dict[str, NodeFiles]:
    """A CA and one certificate per node (id -> its hosts) in `directory` (created 0700):
    ``ca.crt``, ``ca.key``, ``<id>.crt``, ``<id>.key``. Files from an earlier call are reused
    while they still fit (same CA, the node's name and hosts, more than RENEW_BEFORE left);
    anything else is issued again. For throwaway clusters: the CA key sits beside the certs."""
    ca, ca_crt = _ensure_ca(directory, common_name)
    out = {}
    for node_id, hosts in nodes.items():
        files = NodeFiles(directory / f"{node_id}.crt", directory / f"{node_id}.key", ca_crt)
        if not _node_cert_fits(files, ca, node_id, hosts):
            cert, key = issue(ca, f"gnomon node {node_id}", node_id=node_id,
                              hosts=[*hosts, "localhost"])
            write_key(files.key, key)
            write_cert(files.cert, cert)
        out[node_id] = files
    return out


def ensure_gateway_files(directory: Path, name: str, hosts: Sequence[str], *,
                         common_name: str = "gnomon dev cluster CA") -> NodeFiles:
    """A gateway's serving certificate from the CA in `directory` (made as for
    ensure_cluster_files): ``<name>.crt`` / ``<name>.key`` naming `hosts` and no node
    identity, so a gateway's key can never pass for a Raft peer. Reused while it fits."""
    ca, ca_crt = _ensure_ca(directory, common_name)
    files = NodeFiles(directory / f"{name}.crt", directory / f"{name}.key", ca_crt)
    if not _node_cert_fits(files, ca, None, hosts):
        cert, key = issue(ca, f"gnomon gateway {name}", hosts=[*hosts, "localhost"])
        write_key(files.key, key)
        write_cert(files.cert, cert)
    return files


def _ensure_ca(directory: Path, common_name: str) -> tuple[CertificateAuthority, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    ca_crt, ca_key = directory / "ca.crt", directory / "ca.key"
    ca = _load_ca(ca_crt, ca_key)
    if ca is None:
        ca = new_ca(common_name)
        write_key(ca_key, ca.key)
        write_cert(ca_crt, ca.cert)
    return ca, ca_crt


def _load_ca(crt: Path, key_path: Path) -> CertificateAuthority | None:
    try:
        cert = x509.load_pem_x509_certificate(crt.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError):
        return None
    public = cert.public_key()
    if not isinstance(key, ec.EllipticCurvePrivateKey) or \
            not isinstance(public, ec.EllipticCurvePublicKey) or \
            key.public_key().public_numbers() != public.public_numbers():
        return None
    if cert.not_valid_after_utc - dt.datetime.now(dt.UTC) < RENEW_BEFORE:
        return None
    return CertificateAuthority(cert, key)


def _node_cert_fits(files: NodeFiles, ca: CertificateAuthority, node_id: str | None,
                    hosts: Sequence[str]) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
        key = serialization.load_pem_private_key(files.key.read_bytes(), password=None)
        cert.verify_directly_issued_by(ca.cert)
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, TypeError, x509.ExtensionNotFound, InvalidSignature):
        return False
    if cert.public_key().public_bytes(serialization.Encoding.DER,
                                      serialization.PublicFormat.SubjectPublicKeyInfo) != \
            key.public_key().public_bytes(serialization.Encoding.DER,
                                          serialization.PublicFormat.SubjectPublicKeyInfo):
        return False
    if _cert_node_ids(cert) != ([node_id] if node_id is not None else []):
        return False
    named = {str(ip) for ip in san.get_values_for_type(x509.IPAddress)} | \
        set(san.get_values_for_type(x509.DNSName))
    wanted = set()
    for host in hosts:
        try:
            wanted.add(str(ipaddress.ip_address(host)))
        except ValueError:
            wanted.add(host)
    return wanted <= named and cert.not_valid_after_utc - dt.datetime.now(dt.UTC) > RENEW_BEFORE
