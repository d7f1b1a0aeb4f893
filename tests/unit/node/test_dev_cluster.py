"""The dev cluster's own probes are secured like every LocalCluster's: `gnomon dev` asked its
nodes for a leader in plaintext on their TLS ports, never got one, and stopped the whole
cluster 60 s after start (make run died every time)."""

from gnomon.node.local.dev import DevCluster


def test_a_secure_dev_cluster_probes_with_tls_and_the_admin_token(tmp_path):
    cluster = DevCluster(tmp_path, grpc_ports=(17701, 17702, 17703),
                         raft_ports=(17801, 17802, 17803), secure=True, mutual_tls=False)
    assert all(node.credentials is not None for node in cluster.nodes)
    assert [node.url for node in cluster.nodes] == [
        "https://127.0.0.1:17601", "https://127.0.0.1:17602", "https://127.0.0.1:17603"]
    assert (tmp_path / "tls" / "admin.token").stat().st_mode & 0o777 == 0o600


def test_an_insecure_dev_cluster_probes_in_plaintext(tmp_path):
    cluster = DevCluster(tmp_path, grpc_ports=(17701, 17702, 17703),
                         raft_ports=(17801, 17802, 17803), secure=False)
    assert all(node.credentials is None for node in cluster.nodes)
    assert cluster.nodes[0].url == "http://127.0.0.1:17601"


def test_the_dev_cluster_says_how_it_runs_in_dev_json_0600(tmp_path):
    import json
    import os

    from gnomon.node.local.dev import write_dev_state

    old = os.umask(0o022)
    try:
        for secure in (True, False):
            cluster = DevCluster(tmp_path, grpc_ports=(17701, 17702, 17703),
                                 raft_ports=(17801, 17802, 17803), secure=secure)
            write_dev_state(tmp_path, cluster, secure=secure)
            state = json.loads((tmp_path / "dev.json").read_text())
            assert state["secure"] is secure
            assert state["grpc"] == ["127.0.0.1:17701", "127.0.0.1:17702", "127.0.0.1:17703"]
            assert ("ca_file" in state) is secure
            assert (tmp_path / "dev.json").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
