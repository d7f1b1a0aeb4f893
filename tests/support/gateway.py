"""Reading a gateway's /metrics in the tests."""

from __future__ import annotations

from urllib.request import urlopen

from prometheus_client.parser import text_string_to_metric_families

from gnomon.node.local.gateway import GatewayProc


def gateway_metric(gw: GatewayProc, name: str, **labels: str) -> float:
    """One sample of the gateway's /metrics (0 when absent)."""
    with urlopen(f"http://{gw.metrics_addr}/metrics", timeout=10) as r:
        text = r.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0
