"""The node's certificates, read again when their files change (cert-manager renews
short-lived certificates in place; a restart per renewal would cost a leader election):
the client ports' (`ServingCertificate`) and the Raft port's (`PeerCertificate`).

`ServingCertificate` holds the last good (key, certificate, client CA) of `tls_key`,
`tls_cert` and `tls_client_ca`. `refresh()` (the node calls it every
`tls_reload_interval_ms`) stats the files and, when one changed, reads them and checks that
the key matches the certificate (an in-memory TLS context loads them) before it installs
them: a half-written renewal (a new certificate beside the old key) is kept out, warned
about once, and tried again at the next change. New connections get the new certificate;
open ones keep theirs.

Thread rules: `refresh()` runs on the event loop; gRPC calls the fetcher of
`grpc_credentials()` from its own threads at each handshake, and it only reads the current
generation (one attribute swap, under the GIL).
"""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

import grpc

from gnomon.node.security.certificates import PeerTls, TlsError, load_peer_tls

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Pem:
    key: bytes
    cert: bytes
    client_ca: bytes | None
    generation: int


class FileWatch:
    """Whether files changed (mtime, size, inode) since the version accepted or refused."""

    def __init__(self, paths: tuple[str, ...]):
        self._paths = paths
        self._accepted = self._signature()
        self._refused: tuple | None = None
        self._seen = self._accepted

    def changed(self) -> bool:
        self._seen = self._signature()
        return self._seen not in (self._accepted, self._refused)

    def accept(self) -> None:
        self._accepted, self._refused = self._seen, None

    def refuse(self) -> None:
        self._refused = self._seen

    def _signature(self) -> tuple:
        out = []
        for path in self._paths:
            try:
                st = os.stat(path) if path else None
            except OSError:
                st = None
            out.append((st.st_mtime_ns, st.st_size, st.st_ino) if st else None)
        return tuple(out)


class PeerCertificate:
    """The Raft port's TLS (raft_tls_cert, raft_tls_key, raft_tls_ca), loaded again when its
    files change, with every check of a start (load_peer_tls: it names this node, is valid
    now, matches its key, chains to the CA). The transport reads `current` at each new
    connection (the tick thread; one attribute swap)."""

    def __init__(self, cert: str, key: str, ca: str, node_id: str):
        self._args = (cert, key, ca, node_id)
        self._watch = FileWatch((cert, key, ca))
        self.current: PeerTls = load_peer_tls(cert, key, ca, node_id)

    def refresh(self) -> bool:
        if not self._watch.changed():
            return False
        try:
            tls = load_peer_tls(*self._args)
        except TlsError as exc:
            self._watch.refuse()
            log.warning("raft_tls_cert: the changed files do not load (%s); new Raft "
                        "connections keep the certificate loaded before", exc)
            return False
        self._watch.accept()
        self.current = tls
        log.info("raft_tls_cert: reloaded %s: new Raft connections present it", self._args[0])
        return True


class ServingCertificate:
    def __init__(self, cert: str, key: str, client_ca: str = ""):
        self._paths = (key, cert, client_ca)
        self._watch = FileWatch(self._paths)
        pem = self._read(0)
        if pem is None:
            raise SystemExit(f"gnomon-node: tls_cert: {cert!r} and tls_key {key!r} (and "
                             f"tls_client_ca {client_ca!r}) do not load as a key, its "
                             "certificate and a CA")
        self._pem: _Pem = pem

    @property
    def paths(self) -> tuple[str, str, str]:
        """(tls_key, tls_cert, tls_client_ca) as configured."""
        return self._paths

    def refresh(self) -> bool:
        """Read the files again if any changed; True when a new certificate is installed."""
        if not self._watch.changed():
            return False
        pem = self._read(self._pem.generation + 1)
        if pem is None:
            self._watch.refuse()
            log.warning("tls_cert: the changed files (%s) do not load as a key and its "
                        "certificate; new connections keep the certificate loaded before",
                        ", ".join(p for p in self._paths if p))
            return False
        self._watch.accept()
        self._pem = pem
        log.info("tls_cert: reloaded %s (generation %d): new connections present it",
                 self._paths[1], pem.generation)
        return True

    def grpc_credentials(self) -> grpc.ServerCredentials:
        """Credentials whose certificate follows refresh() at each new handshake."""
        served = [self._pem.generation]

        def fetch() -> grpc.ServerCertificateConfiguration | None:
            pem = self._pem
            if pem.generation == served[0]:
                return None  # keep the current one
            served[0] = pem.generation
            return _configuration(pem)

        # grpc's stub types the fetcher as never returning None; None keeps the current one.
        return grpc.dynamic_ssl_server_credentials(
            _configuration(self._pem), fetch,  # type: ignore[arg-type]
            require_client_authentication=self._pem.client_ca is not None)

    def load_into(self, ctx: ssl.SSLContext) -> None:
        """Put the current certificate into `ctx` (the HTTP port's: new handshakes use it)."""
        _load(ctx, self._pem)

    def _read(self, generation: int) -> _Pem | None:
        key_path, cert_path, ca_path = self._paths
        try:
            pem = _Pem(Path(key_path).read_bytes(), Path(cert_path).read_bytes(),
                       Path(ca_path).read_bytes() if ca_path else None, generation)
            _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), pem)  # the bytes read, checked
        except (OSError, ssl.SSLError, ValueError):
            return None
        return pem


def _load(ctx: ssl.SSLContext, pem: _Pem) -> None:
    """Load `pem` into `ctx` (load_cert_chain reads files only: a private temporary pair)."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o700)
        key, cert = Path(tmp) / "key.pem", Path(tmp) / "cert.pem"
        key.write_bytes(pem.key)
        cert.write_bytes(pem.cert)
        ctx.load_cert_chain(cert, key)
    if pem.client_ca is not None:
        ctx.load_verify_locations(cadata=pem.client_ca.decode("ascii", "replace"))


def _configuration(pem: _Pem) -> grpc.ServerCertificateConfiguration:
    return grpc.ssl_server_certificate_configuration([(pem.key, pem.cert)],
                                                     root_certificates=pem.client_ca)
