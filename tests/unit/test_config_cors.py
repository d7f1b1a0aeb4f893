"""http_cors_origins: the web origins besides the cluster's own that may call a node without
authentication (node/security/DESIGN.md, "Web pages"), each exactly as a browser sends it."""

import pytest

from gnomon.node.config import ConfigError, load, web_origin

BASE = ["--node-id", "n1", "--raft-tls-cert", "n.crt", "--raft-tls-key", "n.key",
        "--raft-tls-ca", "ca.crt", "--member", "n1=127.0.0.1:7801,127.0.0.1:7701,127.0.0.1:7601"]


def test_origins_from_a_flag_the_environment_and_toml(tmp_path):
    cfg = load([*BASE, "--http-cors-origins", "https://ops.example, http://127.0.0.1:8080"], {})
    assert cfg.http_cors_origins == ("https://ops.example", "http://127.0.0.1:8080")
    env = load(BASE, {"GNOMON_HTTP_CORS_ORIGINS": "https://a.example"})
    assert env.http_cors_origins == ("https://a.example",)
    toml = tmp_path / "node.toml"
    toml.write_text('http_cors_origins = ["https://b.example", "http://[::1]:7601"]\n')
    assert load([*BASE, "--config", str(toml)], {}).http_cors_origins == (
        "https://b.example", "http://[::1]:7601")
    assert load(BASE, {}).http_cors_origins == ()


@pytest.mark.parametrize(("origin", "says"), [
    ("null", "not an origin"),  # a redirected cross-origin request's: would allow every page
    ("*", "not an origin"),
    ("https://ops.example/", "no path"),
    ("https://ops.example/ui", "no path"),
    ("ops.example", "not an origin"),
    ("ftp://ops.example", "not an origin"),
    ("https://user@ops.example", "not an origin"),
    ("https://ops.example:port", "not an origin"),
    ("HTTPS://Ops.Example", "'https://ops.example'"),  # as the browser writes it
    ("https://ops.example:443", "'https://ops.example'"),
    ("http://ops.example:80", "'http://ops.example'"),
])
def test_a_bad_origin_is_refused_naming_the_key(origin, says):
    with pytest.raises(ConfigError, match="http_cors_origins: .*" + says.replace("*", r"\*")):
        load([*BASE, "--http-cors-origins", origin], {})


def test_member_addresses_become_origins_as_a_browser_sends_them():
    assert web_origin("http", "127.0.0.1:7601") == "http://127.0.0.1:7601"
    assert web_origin("https", "Node1.Example:443") == "https://node1.example"
    assert web_origin("http", "node1:80") == "http://node1"
    assert web_origin("https", "[::1]:7601") == "https://[::1]:7601"
