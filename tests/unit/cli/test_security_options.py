"""Where the CLI's TLS and token options come from: flags, GNOMON_* variables, or, for the
default servers, the `gnomon dev` cluster beside it (./.gnomon) as its dev.json says it runs."""

from __future__ import annotations

import argparse
import json

import pytest

from gnomon.client.cli import _security
from gnomon.client.cli.values import UsageError


def _args(**kw) -> argparse.Namespace:
    return argparse.Namespace(group="job", **kw)


def _dev_files(root, *, secure: bool | None = True):
    """What a secure `gnomon dev` leaves in ./.gnomon; dev.json as a run with `secure` wrote
    it (None: no dev.json, as before any run of this version)."""
    tls = root / ".gnomon" / "tls"
    tls.mkdir(parents=True)
    (tls / "ca.crt").write_text("CA")
    (tls / "admin.token").write_text("dev-admin-token\n")
    if secure is not None:
        state = {"grpc": ["127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"], "secure": secure}
        if secure:
            state |= {"ca_file": "tls/ca.crt", "token_file": "tls/admin.token"}
        (root / ".gnomon" / "dev.json").write_text(json.dumps(state))


def test_nothing_given_and_no_dev_cluster_means_plaintext(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert _security(_args(), {}) == {"tls": None, "token": None}


def test_the_dev_cluster_beside_is_found_for_the_default_servers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dev_files(tmp_path)
    got = _security(_args(), {})
    assert got["token"] == "dev-admin-token"
    assert got["tls"].ca_file.endswith(".gnomon/tls/ca.crt")
    # Other servers, or anything given explicitly, win.
    assert _security(_args(), {"GNOMON_SERVERS": "10.0.0.1:7701"}) == {"tls": None,
                                                                       "token": None}
    assert _security(_args(), {"GNOMON_TOKEN": "mine"})["token"] == "mine"


def test_flags_and_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    token = tmp_path / "t"
    token.write_text("  secret-1 \n")
    got = _security(_args(ca="ca.pem", cert="c.pem", key="k.pem", token_file=str(token)), {})
    assert (got["tls"].ca_file, got["tls"].cert_file, got["tls"].key_file) == \
        ("ca.pem", "c.pem", "k.pem")
    assert got["token"] == "secret-1"
    with pytest.raises(UsageError, match="--token-file"):
        _security(_args(token_file=str(tmp_path / "missing")), {})


def test_tls_files_an_earlier_secure_run_left_do_not_make_an_insecure_cluster_speak_tls(
        tmp_path, monkeypatch):
    """After `make run`, .gnomon/tls stays; `gnomon dev --insecure` then runs plaintext and
    every command run there spoke TLS to it (20 lines of handshake noise, exit 3)."""
    monkeypatch.chdir(tmp_path)
    _dev_files(tmp_path, secure=False)
    assert _security(_args(), {}) == {"tls": None, "token": None}


def test_tls_files_without_the_clusters_own_word_are_not_used(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dev_files(tmp_path, secure=None)
    assert _security(_args(), {}) == {"tls": None, "token": None}
