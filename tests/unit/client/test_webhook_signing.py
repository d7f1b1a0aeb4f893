"""The HTTP worker's Standard Webhooks signatures (client/ready_workers/signing.py)."""

from __future__ import annotations

import os

import pytest

from gnomon.client.ready_workers.signing import (
    SigningSecretError,
    load_signing_secret,
    sign,
    signature_headers,
    verify,
)

# The example of the Standard Webhooks specification (spec/standard-webhooks.md).
SPEC_SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SPEC_ID, SPEC_TS, SPEC_BODY = "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, b'{"test": 2432232314}'
SPEC_SIGNATURE = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="


def _secret_file(tmp_path, text: str) -> str:
    path = tmp_path / "secret"
    path.write_text(text + "\n")
    os.chmod(path, 0o600)
    return str(path)


def test_the_specifications_example_signs_and_verifies(tmp_path):
    secret = load_signing_secret(_secret_file(tmp_path, SPEC_SECRET))
    assert sign(secret, SPEC_ID, SPEC_TS, SPEC_BODY) == SPEC_SIGNATURE
    headers = {"webhook-id": SPEC_ID, "webhook-timestamp": str(SPEC_TS),
               "webhook-signature": f"v1,bm90IHRoaXMgb25l {SPEC_SIGNATURE}"}  # one of several
    assert verify(secret, headers, SPEC_BODY, now_s=SPEC_TS + 10)


def test_a_changed_body_id_or_old_timestamp_fails(tmp_path):
    secret = load_signing_secret(_secret_file(tmp_path, SPEC_SECRET))
    headers = signature_headers(secret, "r@1:main", b"{}", now_s=1000)
    assert verify(secret, headers, b"{}", now_s=1000)
    assert not verify(secret, headers, b"{ }", now_s=1000)
    assert not verify(secret, {**headers, "webhook-id": "r@2:main"}, b"{}", now_s=1000)
    assert not verify(secret, headers, b"{}", now_s=1000 + 301)  # a replay, 5 min later
    assert not verify(b"another secret of enough bytes", headers, b"{}", now_s=1000)
    assert not verify(secret, {}, b"{}", now_s=1000)


@pytest.mark.parametrize(("text", "rule"), [("whsec_not base64!", "base64"),
                                            ("whsec_c2hvcnQ=", "at least 24")])
def test_an_unusable_secret_names_the_flag_and_the_rule(tmp_path, text, rule):
    with pytest.raises(SigningSecretError, match=rule) as caught:
        load_signing_secret(_secret_file(tmp_path, text))
    assert str(caught.value).startswith("--signing-secret-file: ")
    with pytest.raises(SigningSecretError, match="cannot read"):
        load_signing_secret(str(tmp_path / "absent"))
