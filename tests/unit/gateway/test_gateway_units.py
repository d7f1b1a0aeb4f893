"""The gateway's pieces without processes: its settings refuse bad values naming them, the
metadata a node sees and the trailers a caller sees, and the replay's bound."""

from __future__ import annotations

import pytest

from gnomon.gateway.cli import config_from, parser
from gnomon.gateway.config import ConfigError, GatewayConfig
from gnomon.gateway.proxy import _END, Proxy, _Replay, forwarded, rpc_handlers
from gnomon.gateway.upstream import Upstream, caller_trailers, leader_hint
from gnomon.v1 import api_pb2, worker_pb2


@pytest.mark.parametrize(("argv", "message"), [
    (["--servers", ""], "servers: at least one"),
    (["--servers", "n1"], "servers: 'n1' is not host:port"),
    (["--servers", "n1:1", "--listen", "x:99999"], "listen_addr: 'x:99999'"),
    (["--servers", "n1:1", "--tls-cert", "c.pem"], "tls_cert and tls_key"),
    (["--servers", "n1:1", "--upstream-cert", "c", "--upstream-key", "k"], "needs upstream_ca"),
    (["--servers", "n1:1", "--max-calls", "0"], "max_calls: must be at least 1"),
    (["--servers", "n1:1", "--stream-buffer", "0"], "stream_buffer_messages: must be at least 1"),
    (["--servers", "n1:1", "--http-listen", "127.0.0.1:1"], "http_servers: the nodes' HTTP"),
    (["--servers", "n1:1", "--http-listen", "h:1", "--http-servers", "n1"],
     "http_servers: 'n1' is not host:port"),
    (["--servers", "n1:1", "--http-max-body", "0"], "http_max_body_bytes: must be at least 1"),
    (["--servers", "n1:1", "--worker-upstream", "relay"],
     "relay_token_file: required with worker_upstream 'relay'"),
])
def test_bad_settings_name_the_setting_and_the_rule(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        config_from(parser().parse_args(argv))


def test_relay_heartbeats_is_frames_or_messages():
    assert GatewayConfig("g:1", ("a:1",)).relay_heartbeats == "frames"
    with pytest.raises(ConfigError, match="relay_heartbeats: 'frames' or 'messages', not 'x'"):
        GatewayConfig("g:1", ("a:1",), relay_heartbeats="x")


def test_defaults_and_the_hint_address():
    cfg = config_from(parser().parse_args(["--servers", "a:1, b:2"]))
    assert cfg.servers == ("a:1", "b:2") and cfg.hint_addr == cfg.listen_addr
    assert GatewayConfig("g:1", ("a:1",), advertise_addr="gw.example:443").hint_addr == \
        "gw.example:443"


def test_worker_streams_are_relayed_when_a_relay_token_is_given_and_it_is_read_stripped(
        tmp_path):
    assert config_from(parser().parse_args(["--servers", "a:1"])).worker_upstream == "stream"
    token = tmp_path / "gw.token"
    token.write_text("  s3cret\n")
    given = ["--servers", "a:1", "--relay-token-file", str(token)]
    assert config_from(parser().parse_args(given)).worker_upstream == "relay"
    assert config_from(parser().parse_args(
        [*given, "--worker-upstream", "stream"])).worker_upstream == "stream"
    cfg = config_from(parser().parse_args(["--servers", "a:1", "--worker-upstream", "relay",
                                           "--relay-token-file", str(token)]))
    assert cfg.relay_token() == "s3cret"
    token.write_text("\n")
    with pytest.raises(ConfigError, match="relay_token_file: .* must hold one token"):
        cfg.relay_token()
    with pytest.raises(ConfigError, match="relay_token_file: .* cannot be read"):
        GatewayConfig("g:1", ("a:1",), worker_upstream="relay",
                      relay_token_file=str(tmp_path / "none")).relay_token()


def test_a_node_sees_the_callers_metadata_but_not_the_hops():
    md = (("authorization", "Bearer t"), ("user-agent", "x"), ("grpc-timeout", "1S"),
          (":authority", "gw"), ("gnomon-request-id", "r1"))
    assert forwarded(md) == (("authorization", "Bearer t"), ("gnomon-request-id", "r1"))


def test_a_caller_is_told_to_come_back_to_the_gateway_never_to_a_node():
    trailers = (("gnomon-leader", "10.0.0.7:7701"), ("gnomon-reason", "NOT_LEADER"))
    assert caller_trailers(trailers, "gw:7700") == (("gnomon-leader", "gw:7700"),
                                             ("gnomon-reason", "NOT_LEADER"))
    assert leader_hint(trailers) == "10.0.0.7:7701" and leader_hint(None) == ""


def test_a_replay_holds_at_most_its_bound_then_gives_up_replaying():
    replay = _Replay(2)
    replay.record(b"hello")
    replay.record(_END)
    assert replay.messages == [b"hello", _END] and replay.replayable
    replay.record(b"credits")  # beyond the bound: nothing kept, no replay
    assert replay.messages == [] and not replay.replayable
    answered = _Replay(2)
    answered.record(b"hello")
    answered.answered()
    answered.record(b"heartbeat")
    assert answered.messages == [] and not answered.replayable


async def test_every_gnomon_v1_method_has_a_handler():
    proxy = Proxy(GatewayConfig("127.0.0.1:1", ("127.0.0.1:2",)),
                  Upstream(GatewayConfig("127.0.0.1:1", ("127.0.0.1:2",))))
    handlers = rpc_handlers(proxy)
    services = [*api_pb2.DESCRIPTOR.services_by_name.values(),
                *worker_pb2.DESCRIPTOR.services_by_name.values()]
    assert len(handlers) == len(services)
    connect = worker_pb2.DESCRIPTOR.services_by_name["WorkerService"].methods_by_name["Connect"]
    assert connect.client_streaming and connect.server_streaming
    await proxy.upstream.close()
