"""Signed webhooks for the HTTP worker, as the Standard Webhooks specification has them
(https://www.standardwebhooks.com/): three headers a receiver checks before it acts.

    webhook-id         the task's idempotency key (<run_id>:<task_name>): the same for every
                       attempt, so a receiver dedupes on it
    webhook-timestamp  seconds since the epoch when the request was signed
    webhook-signature  "v1," + base64(HMAC-SHA256(secret, "<id>.<timestamp>.<body>"))

The secret is a file holding ``whsec_`` + base64 of at least 24 random bytes (or the base64
alone); `verify` is the receiver's side, for Python receivers and for tests.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time
from collections.abc import Mapping

PREFIX = "whsec_"
MIN_SECRET_BYTES = 24
DEFAULT_TOLERANCE_S = 300


class SigningSecretError(ValueError):
    """The signing secret file cannot be used (it names the file and the rule)."""


def load_signing_secret(path: str) -> bytes:
    """The secret's bytes from `path` (``whsec_<base64>`` or the base64 alone)."""
    try:
        text = open(path).read().strip()  # noqa: SIM115 - read at once
    except OSError as exc:
        raise SigningSecretError(f"--signing-secret-file: cannot read {path}: "
                                 f"{exc.strerror}") from None
    try:
        secret = base64.b64decode(text.removeprefix(PREFIX), validate=True)
    except (binascii.Error, ValueError):
        raise SigningSecretError(f"--signing-secret-file: {path} is not whsec_ followed by "
                                 "base64") from None
    if len(secret) < MIN_SECRET_BYTES:
        raise SigningSecretError(f"--signing-secret-file: {path} holds {len(secret)} bytes; "
                                 f"at least {MIN_SECRET_BYTES} random bytes are needed")
    return secret


def readable_by_others(path: str) -> bool:
    """Whether group or others may read the secret (the worker warns, as ssh does)."""
    return bool(os.stat(path).st_mode & 0o077)


def sign(secret: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """The webhook-signature header's value."""
    signed = f"{msg_id}.{timestamp_s}.".encode() + body
    digest = hmac.new(secret, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signature_headers(secret: bytes, msg_id: str, body: bytes,
                      now_s: float | None = None) -> dict[str, str]:
    timestamp_s = int(time.time() if now_s is None else now_s)
    return {"webhook-id": msg_id, "webhook-timestamp": str(timestamp_s),
            "webhook-signature": sign(secret, msg_id, timestamp_s, body)}


def verify(secret: bytes, headers: Mapping[str, str], body: bytes, *,
           tolerance_s: int = DEFAULT_TOLERANCE_S, now_s: float | None = None) -> bool:
    """A receiver's check: a v1 signature of these headers and body by `secret`, signed
    within `tolerance_s` of now (a replayed old request fails)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        msg_id, timestamp_s = lowered["webhook-id"], int(lowered["webhook-timestamp"])
        signatures = lowered["webhook-signature"].split()
    except (KeyError, ValueError):
        return False
    now_s = time.time() if now_s is None else now_s
    if abs(now_s - timestamp_s) > tolerance_s:
        return False
    expected = sign(secret, msg_id, timestamp_s, body)
    return any(hmac.compare_digest(expected, s) for s in signatures)
