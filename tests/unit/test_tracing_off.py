"""Tracing is off by default: with it off (or the otel extra absent) nothing imports
opentelemetry, on the node or in the client and worker SDK, and the hot paths' hooks answer
without it (node/ops/DESIGN.md, "Tracing")."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from gnomon.node.config import ConfigError, load
from gnomon.node.ops import tracing

OFF = textwrap.dedent("""
    import sys
    from gnomon.node import server  # noqa: F401 - the node's whole import graph
    from gnomon.node.api.http import server as http_server  # noqa: F401
    from gnomon.node.ops import tracing
    from gnomon.client import tracing as client_tracing
    from gnomon.client.cli import main  # noqa: F401
    from gnomon.client.ready_workers import http, shell  # noqa: F401
    assert tracing.configure(tracing.mode_from_env("", {}), "n1") is False
    assert not tracing.enabled() and tracing.current_span() is None
    tracing.emit([])
    assert client_tracing.outgoing_metadata() == ()
    with client_tracing.execution_span("00-" + "1" * 32 + "-" + "2" * 16 + "-01", "t", {}) as tp:
        assert tp == "00-" + "1" * 32 + "-" + "2" * 16 + "-01"  # handed on unchanged
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    assert not loaded, loaded
    print("off")
""")


def test_nothing_imports_opentelemetry_while_tracing_is_off():
    done = subprocess.run([sys.executable, "-c", OFF], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "off", done.stderr[-2000:]


def test_mode_comes_from_the_setting_then_otel_traces_exporter():
    assert tracing.mode_from_env("", {}) == "none"
    assert tracing.mode_from_env("", {"OTEL_TRACES_EXPORTER": "otlp"}) == "otlp"
    assert tracing.mode_from_env("", {"OTEL_TRACES_EXPORTER": "jaeger"}) == "none"
    assert tracing.mode_from_env("none", {"OTEL_TRACES_EXPORTER": "otlp"}) == "none"


def test_a_bad_tracing_setting_names_the_field_and_the_choices():
    with pytest.raises(ConfigError, match=r"tracing: 'zipkin' is not otlp, console or none"):
        load(["--node-id", "n1", "--member", "n1=127.0.0.1:1,127.0.0.1:2", "--tracing", "zipkin",
              "--raft-tls-cert", "n.crt", "--raft-tls-key", "n.key", "--raft-tls-ca", "ca.crt"],
             env={})
