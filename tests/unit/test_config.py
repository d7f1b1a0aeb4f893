"""Node configuration: defaults < TOML < GNOMON_* environment < flags; errors name the key."""

import pytest

from gnomon.node.config import ConfigError, Member, load

MEMBERS = ["--member", "n1=127.0.0.1:7801,127.0.0.1:7701",
           "--member", "n2=127.0.0.1:7802,127.0.0.1:7702"]


def test_flags_override_environment_override_toml(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('node_id = "n1"\ncluster_secret = "from-the-file"\nlease_ttl_ms = 9000\n'
                    'heartbeat_interval_ms = 1000\n'
                    '[[members]]\nid = "n1"\nraft = "127.0.0.1:7801"\ngrpc = "127.0.0.1:7701"\n')
    env = {"GNOMON_LEASE_TTL_MS": "8000", "GNOMON_CLUSTER_SECRET": "from-the-env"}
    cfg = load(["--config", str(toml), "--lease-ttl-ms", "7000"], env)
    assert cfg.lease_ttl_ms == 7000
    assert cfg.cluster_secret == "from-the-env"
    assert cfg.heartbeat_interval_ms == 1000
    assert cfg.members == (Member("n1", "127.0.0.1:7801", "127.0.0.1:7701"),)


def test_members_from_environment():
    env = {"GNOMON_NODE_ID": "n2", "GNOMON_CLUSTER_SECRET": "s3cret-enough",
           "GNOMON_MEMBERS": "n1=a:1,a:2;n2=b:1,b:2"}
    cfg = load([], env)
    assert cfg.self_member == Member("n2", "b:1", "b:2")
    assert [m.node_id for m in cfg.peers] == ["n1"]


@pytest.mark.parametrize(("argv", "named"), [
    (["--cluster-secret", "long-enough"], "node_id"),
    (["--node-id", "n1", "--cluster-secret", "long-enough"], "members"),
    (["--node-id", "n9", "--cluster-secret", "long-enough", *MEMBERS], "node_id"),
    (["--node-id", "n1", *MEMBERS], "cluster_secret"),
    (["--node-id", "n1", "--cluster-secret", "long-enough", "--lease-ttl-ms", "abc", *MEMBERS],
     "lease_ttl_ms"),
    (["--node-id", "n1", "--cluster-secret", "long-enough", "--member", "n1=nocomma"],
     "member"),
    (["--node-id", "n1", "--cluster-secret", "long-enough", "--lease-ttl-ms", "1000",
      "--heartbeat-interval-ms", "900", *MEMBERS], "heartbeat_interval_ms"),
])
def test_bad_configuration_names_the_key(argv, named):
    with pytest.raises(ConfigError, match=named):
        load(argv, {})


def test_unknown_toml_key_is_refused(tmp_path):
    toml = tmp_path / "node.toml"
    toml.write_text('lease_tll_ms = 5\n')
    with pytest.raises(ConfigError, match="lease_tll_ms: unknown"):
        load(["--config", str(toml)], {})
