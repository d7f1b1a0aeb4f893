"""Node configuration: defaults < TOML < GNOMON_* environment < flags; errors name the key."""

import pytest

from gnomon.node.config import ConfigError, Member, load

MEMBERS = ["--member", "n1=127.0.0.1:7801,127.0.0.1:7701",
           "--member", "n2=127.0.0.1:7802,127.0.0.1:7702"]
TLS = ["--raft-tls-cert", "n.crt", "--raft-tls-key", "n.key", "--raft-tls-ca", "ca.crt"]
TLS_ENV = {"GNOMON_RAFT_TLS_CERT": "n.crt", "GNOMON_RAFT_TLS_KEY": "n.key",
           "GNOMON_RAFT_TLS_CA": "ca.crt"}


def test_flags_override_environment_override_toml(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('node_id = "n1"\nraft_tls_cert = "from-the-file"\nlease_ttl_ms = 9000\n'
                    'raft_tls_key = "n.key"\nraft_tls_ca = "ca.crt"\nheartbeat_interval_ms = 1000\n'
                    '[[members]]\nid = "n1"\nraft = "127.0.0.1:7801"\ngrpc = "127.0.0.1:7701"\n')
    env = {"GNOMON_LEASE_TTL_MS": "8000", "GNOMON_RAFT_TLS_CERT": "from-the-env"}
    cfg = load(["--config", str(toml), "--lease-ttl-ms", "7000"], env)
    assert cfg.lease_ttl_ms == 7000
    assert cfg.raft_tls_cert == "from-the-env"
    assert cfg.heartbeat_interval_ms == 1000
    assert cfg.members == (Member("n1", "127.0.0.1:7801", "127.0.0.1:7701"),)


def test_members_from_environment():
    env = {"GNOMON_NODE_ID": "n2", **TLS_ENV, "GNOMON_MEMBERS": "n1=a:1,a:2;n2=b:1,b:2"}
    cfg = load([], env)
    assert cfg.self_member == Member("n2", "b:1", "b:2")
    assert [m.node_id for m in cfg.peers] == ["n1"]


@pytest.mark.parametrize(("argv", "named"), [
    ([*TLS], "node_id"),
    (["--node-id", "n1", *TLS], "members"),
    (["--node-id", "n9", *TLS, *MEMBERS], "node_id"),
    (["--node-id", "n1", *MEMBERS], "raft_tls_cert: required"),
    (["--node-id", "n1", *TLS[:4], *MEMBERS], "raft_tls_ca: required"),
    (["--node-id", "n1", *TLS, "--lease-ttl-ms", "abc", *MEMBERS], "lease_ttl_ms"),
    (["--node-id", "n1", *TLS, "--member", "n1=nocomma"], "member"),
    (["--node-id", "n1", *TLS, "--lease-ttl-ms", "1000",
      "--heartbeat-interval-ms", "900", *MEMBERS], "heartbeat_interval_ms"),
    (["--node-id", "n1", *TLS, "--raft-max-frame-bytes", "1000000", *MEMBERS],
     "raft_max_frame_bytes: must be at least"),
    (["--node-id", "n1", *TLS, "--raft-append-batch-bytes", "1000000", *MEMBERS],
     "raft_append_batch_bytes: must be at least"),
    (["--node-id", "n1", *TLS, "--raft-handshake-timeout-ms", "0", *MEMBERS],
     "raft_handshake_timeout_ms: must be positive"),
])
def test_bad_configuration_names_the_key(argv, named):
    with pytest.raises(ConfigError, match=named):
        load(argv, {})


def test_unknown_toml_key_is_refused(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('lease_tll_ms = 5\n')
    with pytest.raises(ConfigError, match="lease_tll_ms: unknown"):
        load(["--config", str(toml)], {})


@pytest.mark.parametrize("line", ["members = 5", "canaries = 3"])
def test_a_toml_list_key_that_is_not_a_list_names_the_key(tmp_path, line):
    # Was TypeError ('int' object is not iterable), found by mypy: raw TOML values are objects.
    toml = tmp_path / "node.toml"
    toml.write_text(line + "\n")
    with pytest.raises(ConfigError, match=line.split()[0] + ": .* is not a list"):
        load(["--node-id", "n1", *TLS, "--config", str(toml)], {})


WORKER_STREAM_BOUNDS = ["worker_outbox_max_messages", "worker_outbox_max_bytes",
                        "worker_max_pending_reports", "worker_stall_timeout_ms",
                        "worker_max_heartbeat_leases", "worker_max_polls"]


@pytest.mark.parametrize("name", WORKER_STREAM_BOUNDS)
def test_worker_stream_bounds_are_at_least_one(name):
    flag = "--" + name.replace("_", "-")
    assert getattr(load(["--node-id", "n1", *TLS, *MEMBERS, flag, "1"], {}), name) == 1
    with pytest.raises(ConfigError, match=f"{name}: must be >= 1, got 0"):
        load(["--node-id", "n1", *TLS, *MEMBERS, flag, "0"], {})


def test_stream_refusal_drain_may_be_zero_not_negative():
    base = ["--node-id", "n1", *TLS, *MEMBERS]
    assert load([*base, "--stream-refusal-drain-ms", "0"], {}).stream_refusal_drain_ms == 0
    with pytest.raises(ConfigError, match="stream_refusal_drain_ms: must be >= 0"):
        load([*base, "--stream-refusal-drain-ms", "-1"], {})
