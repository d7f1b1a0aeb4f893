"""Raft-port certificates (node/security/certificates.py): a node refuses to start with files that do not fit,
with a message that names the setting."""

from __future__ import annotations

import datetime as dt

import pytest

from gnomon.node.security import certificates as tls


@pytest.fixture
def files(tmp_path):
    return tls.ensure_cluster_files(tmp_path / "tls", {"n1": ["127.0.0.1"], "n2": ["::1"]})


def _load(f, node_id="n1", **kw):
    return tls.load_peer_tls(str(f.cert), str(f.key), str(f.ca), node_id, **kw)


def test_generated_files_load_and_are_reused(files, tmp_path):
    loaded = _load(files["n1"])
    assert loaded.node_id == "n1"
    assert (files["n1"].key.stat().st_mode & 0o777) == 0o600
    before = files["n1"].cert.read_bytes()
    again = tls.ensure_cluster_files(tmp_path / "tls", {"n1": ["127.0.0.1"]})
    assert again["n1"].cert.read_bytes() == before


def test_certificate_of_another_node_is_refused(files):
    with pytest.raises(tls.TlsError, match="raft_tls_cert: .* must name exactly this node"):
        _load(files["n2"], node_id="n1")


def test_expired_certificate_is_refused(files):
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)
    with pytest.raises(tls.TlsError, match="raft_tls_cert: .* expired"):
        _load(files["n1"], now=later)


def test_certificate_of_another_ca_is_refused(files, tmp_path):
    other = tls.ensure_cluster_files(tmp_path / "other", {"n1": ["127.0.0.1"]})
    with pytest.raises(tls.TlsError, match="raft_tls_ca"):
        tls.load_peer_tls(str(other["n1"].cert), str(other["n1"].key), str(files["n1"].ca),
                          "n1")


def test_key_of_another_certificate_is_refused(files):
    with pytest.raises(tls.TlsError, match="raft_tls_key"):
        tls.load_peer_tls(str(files["n1"].cert), str(files["n2"].key), str(files["n1"].ca),
                          "n1")


def test_missing_file_names_the_setting(files, tmp_path):
    with pytest.raises(tls.TlsError, match="raft_tls_ca: .* not a readable file"):
        tls.load_peer_tls(str(files["n1"].cert), str(files["n1"].key),
                          str(tmp_path / "nope.crt"), "n1")


def test_certs_command_writes_a_set(tmp_path, capsys):
    from gnomon.node.certs import main

    assert main(["--dir", str(tmp_path / "c"), "--node", "n1=10.0.0.1",
                 "--node", "n2=10.0.0.2,gnomon-2.internal"]) == 0
    out = capsys.readouterr().out
    assert "n1: --raft-tls-cert" in out and "n2.key" in out
    assert _load(tls.NodeFiles(tmp_path / "c" / "n2.crt", tmp_path / "c" / "n2.key",
                               tmp_path / "c" / "ca.crt"), node_id="n2")


def test_a_gateway_certificate_serves_its_hosts_and_names_no_node(tmp_path, capsys):
    from cryptography import x509

    from gnomon.node.certs import main
    from gnomon.node.security.certificates import _cert_node_ids

    assert main(["--dir", str(tmp_path / "c"), "--gateway", "gw1=10.0.0.9,gw.internal"]) == 0
    assert "gw1: --tls-cert" in capsys.readouterr().out
    crt = tmp_path / "c" / "gw1.crt"
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == {"gw.internal", "localhost"}
    assert _cert_node_ids(cert) == []  # a gateway's key cannot pass for a Raft peer
    assert (tmp_path / "c" / "gw1.key").stat().st_mode & 0o777 == 0o600
    before = crt.read_bytes()
    assert main(["--dir", str(tmp_path / "c"), "--gateway", "gw1=10.0.0.9,gw.internal"]) == 0
    assert crt.read_bytes() == before  # reused while it fits
    assert main(["--dir", str(tmp_path / "c"), "--gateway", "gw1=10.0.0.10"]) == 0
    assert crt.read_bytes() != before  # another host: issued again


def test_a_ca_certificate_whose_key_is_not_ec_is_issued_again(files, tmp_path):
    # Was AttributeError from ensure_cluster_files (an Ed25519 public key has no
    # public_numbers), found by mypy: the CA certificate's key was assumed to be EC.
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from cryptography.x509.oid import NameOID

    key = ed25519.Ed25519PrivateKey.generate()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not ec")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + dt.timedelta(days=3650))
            .sign(key, None))
    tls.write_cert(files["n1"].ca, cert)
    again = tls.ensure_cluster_files(tmp_path / "tls", {"n1": ["127.0.0.1"]})
    assert again["n1"].ca.read_bytes() != cert.public_bytes(tls.serialization.Encoding.PEM)
    assert _load(again["n1"]).node_id == "n1"
