"""The HTTP port's connection bounds in Config (node/api/http/DESIGN.md, "Connections"):
defaults, flags, and the values refused with the key named."""

import pytest

from gnomon.node.config import ConfigError, field_help, load

BASE = ["--node-id", "n1", "--raft-tls-cert", "n.crt", "--raft-tls-key", "n.key",
        "--raft-tls-ca", "ca.crt", "--member", "n1=127.0.0.1:7801,127.0.0.1:7701,127.0.0.1:7601"]
BOUNDS = {"http_header_timeout_ms": 10_000, "http_body_timeout_ms": 30_000,
          "http_idle_timeout_ms": 60_000, "http_write_timeout_ms": 30_000,
          "http_max_connections": 1_024,
          "http_max_connections_per_address": 128, "http_accept_backoff_ms": 1_000,
          "http_error_log_interval_ms": 10_000, "reserved_descriptors": 128}


def test_defaults_flags_and_help():
    cfg = load(BASE, {})
    assert {name: getattr(cfg, name) for name in BOUNDS} == BOUNDS
    set_ = load([*BASE, "--http-header-timeout-ms", "1000", "--reserved-descriptors", "16"],
                {"GNOMON_HTTP_MAX_CONNECTIONS_PER_ADDRESS": "5"})
    assert (set_.http_header_timeout_ms, set_.reserved_descriptors,
            set_.http_max_connections_per_address) == (1000, 16, 5)
    helps = field_help()
    for name in BOUNDS:  # each documented (the comment above it) in --help
        assert "(default: " in helps[name] and len(helps[name]) > 60, (name, helps[name])


@pytest.mark.parametrize(("flags", "says"), [
    (["--http-header-timeout-ms", "0"], "http_header_timeout_ms: must be >= 1"),
    (["--http-body-timeout-ms", "0"], "http_body_timeout_ms: must be >= 1"),
    (["--http-idle-timeout-ms", "-1"], "http_idle_timeout_ms: must be >= 1"),
    (["--http-write-timeout-ms", "0"], "http_write_timeout_ms: must be >= 1"),
    (["--http-max-connections", "0"], "http_max_connections: must be >= 1"),
    (["--http-max-connections-per-address", "0"],
     "http_max_connections_per_address: must be >= 1"),
    (["--http-max-connections", "10", "--http-max-connections-per-address", "11"],
     r"http_max_connections_per_address: must be at most http_max_connections \(10\)"),
    (["--http-accept-backoff-ms", "0"], "http_accept_backoff_ms: must be >= 1"),
    (["--http-error-log-interval-ms", "0"], "http_error_log_interval_ms: must be >= 1"),
    (["--reserved-descriptors", "15"], "reserved_descriptors: must be >= 16"),
])
def test_bad_bounds_are_refused_naming_the_key(flags, says):
    with pytest.raises(ConfigError, match=says):
        load([*BASE, *flags], {})
