"""deploy/ checked without a container engine: Kubernetes manifests against the API schemas
(kubernetes-validate), alert rules and the Prometheus config (promtool), systemd units
(systemd-analyze verify), the compose file against the compose-spec schema (check-jsonschema),
the Dockerfile's shape; and a real local cluster started with exactly the command lines,
environment and ports the Kubernetes manifests give each node and the worker, which fires a
job. A tool that is not installed skips its test and says which."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
BIN = Path(sys.executable).parent


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _all_k8s() -> list[dict]:
    return [d for p in sorted(K8S.glob("*.yaml")) for d in _docs(p)]


def _kind(kind: str, name: str | None = None) -> dict:
    return next(d for d in _all_k8s() if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name))


def test_kubernetes_manifests_validate_against_the_api_schemas():
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    from kubernetes_validate.utils import latest_version

    docs = _all_k8s()
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "PodDisruptionBudget", "ConfigMap", "Deployment"} <= kinds
    for doc in docs:
        kv.validate(doc, latest_version(), strict=True)


def test_statefulset_has_what_an_operator_needs():
    sts = _kind("StatefulSet")
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    node = pod["containers"][0]
    assert spec["podManagementPolicy"] == "Parallel" and spec["volumeClaimTemplates"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert node["readinessProbe"]["grpc"]["service"] == ""
    assert node["livenessProbe"]["grpc"]["service"] == "gnomon.v1.ClusterService"
    assert any(v.get("secret", {}).get("secretName") == "gnomon-tls" for v in pod["volumes"])
    headless = _kind("Service", "gnomon-headless")["spec"]
    assert headless["clusterIP"] == "None" and headless["publishNotReadyAddresses"] is True
    assert _kind("PodDisruptionBudget")["spec"]["minAvailable"] == 2


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("promtool not installed (Debian package prometheus; .ci/run installs it)")
    return tool


def test_alert_rules_and_prometheus_config_pass_promtool():
    tool = _promtool()
    rules = subprocess.run([tool, "check", "rules", str(DEPLOY / "prometheus/alerts.yml")],
                           capture_output=True, text=True, timeout=60)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS: 9 rules found" in rules.stdout
    config = subprocess.run([tool, "check", "config", str(DEPLOY / "prometheus/prometheus.yml")],
                            capture_output=True, text=True, timeout=60)
    assert config.returncode == 0, config.stdout + config.stderr
    names = {r["alert"] for g in yaml.safe_load((DEPLOY / "prometheus/alerts.yml").read_text())
             ["groups"] for r in g["rules"]}
    assert {"GnomonNoLeader", "GnomonQuorumLost", "GnomonFireLatenessHigh",
            "GnomonDeadLettersGrowing", "GnomonLeasesExpiring", "GnomonSnapshotFailing",
            "GnomonDiskNearlyFull"} <= names


def test_systemd_units_verify(tmp_path):
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.skip("systemd-analyze not installed")
    # verify needs the executables and the environment file to exist: point them at this
    # checkout's entry points and an empty file; every other line is as shipped.
    env = tmp_path / "unit.env"
    env.write_text("")
    units = []
    for unit in sorted((DEPLOY / "systemd").glob("*@.service")):
        text = unit.read_text()
        text = text.replace("/usr/local/bin/", f"{BIN}/")
        text = re.sub(r"^EnvironmentFile=.*$", f"EnvironmentFile={env}", text, flags=re.M)
        out = tmp_path / unit.name.replace("@.", "@test.")
        out.write_text(text)
        units.append(str(out))
    done = subprocess.run([tool, "verify", *units], capture_output=True, text=True, timeout=60)
    problems = [line for line in (done.stdout + done.stderr).splitlines()
                if line.strip() and "gnomon" in line]
    assert done.returncode == 0 and not problems, done.stdout + done.stderr
    text = (DEPLOY / "systemd/gnomon-node@.service").read_text()
    for option in ("NoNewPrivileges=yes", "ProtectSystem=strict", "PrivateTmp=yes",
                   "CapabilityBoundingSet=", "SystemCallFilter=@system-service"):
        assert option in text


def test_compose_file_matches_the_compose_spec_schema():
    tool = shutil.which("check-jsonschema", path=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    if tool is None:
        pytest.skip("check-jsonschema not installed (pip install check-jsonschema)")
    done = subprocess.run([tool, "--builtin-schema", "vendor.compose-spec",
                           str(DEPLOY / "docker-compose.yml")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    services = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    assert {"n1", "n2", "n3", "worker", "prometheus", "grafana"} <= set(services)


def test_dockerfile_is_multi_stage_and_runs_unprivileged():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) >= 2 and any("COPY --from=build" in ln for ln in lines)
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["gnomon-node"]' in lines


# -- a real cluster as the manifests describe it ---------------------------------------------

BASE_IP = 21  # 127.0.0.21, .22, .23: one loopback address per pod, the manifests' own ports


def _pod_ip(ordinal: int) -> str:
    return f"127.0.0.{BASE_IP + ordinal}"


def _localize(text: str, ordinal: int, root: Path) -> str:
    """What the cluster's DNS, volumes and Secret give a pod, on this machine."""
    text = re.sub(r"gnomon-(\d+)\.gnomon-headless", lambda m: _pod_ip(int(m.group(1))), text)
    text = text.replace("0.0.0.0", _pod_ip(ordinal))
    text = text.replace("/var/lib/gnomon", str(root / f"pod-{ordinal}" / "data"))
    return text.replace("/etc/gnomon/tls", str(root / "tls"))


def _expand(value: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), value)


def _container_env(container: dict, pod_name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(_kind("ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = _expand(item["value"], env)
        elif item["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            env[item["name"]] = pod_name
    return env


def _command(container: dict) -> list[str]:
    argv = [*container.get("command", []), *container.get("args", [])]
    return [str(BIN / argv[0]), *argv[1:]]


def _health(addr: str, service: str) -> int:
    with grpc.insecure_channel(addr) as ch:
        return health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2).status


def _metric_names(text: str) -> set[str]:
    """Sample names, and every name a declared family may expose (a labelled family has no
    sample before its first event)."""
    names = {line.split("{")[0].split(" ")[0] for line in text.splitlines()
             if line and not line.startswith("#")}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "counter":
                names.add(name.removesuffix("_total") + "_total")
            if kind == "histogram":
                names.update(name + s for s in ("_bucket", "_sum", "_count"))
    return names


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_cluster_started_from_the_manifests_fires_a_job(tmp_path):
    from gnomon.client import Client, JobSpec, OnceSchedule, RunState, TaskSpec
    from gnomon.node.local.cluster import wait_for
    from gnomon.node.security.certificates import ensure_cluster_files

    sts = _kind("StatefulSet")
    replicas = sts["spec"]["replicas"]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    names = [f"{sts['metadata']['name']}-{i}" for i in range(replicas)]
    ensure_cluster_files(tmp_path / "tls", {n: [_pod_ip(i)] for i, n in enumerate(names)})
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    procs: list[subprocess.Popen] = []
    logs = []
    try:
        for i, pod in enumerate(names):
            env = {k: _localize(v, i, tmp_path) for k, v in _container_env(container, pod).items()}
            members = env["GNOMON_MEMBERS"]
            assert f"{pod}={_pod_ip(i)}:{ports['raft']},{_pod_ip(i)}:{ports['grpc']}" in members
            assert env["GNOMON_METRICS_ADDR"] == f"{_pod_ip(i)}:{ports['metrics']}"
            log = open(tmp_path / f"{pod}.log", "wb")  # noqa: SIM115 - closed below
            logs.append(log)
            procs.append(subprocess.Popen(_command(container), env={**base_env, **env},
                                          stdout=log, stderr=subprocess.STDOUT))
        ready = container["readinessProbe"]["grpc"]
        alive = container["livenessProbe"]["grpc"]
        for i in range(replicas):
            addr = f"{_pod_ip(i)}:{ready['port']}"
            wait_for(lambda a=addr: _health(a, ready["service"]) == 1, timeout_s=60,
                     what=f"readiness of {names[i]}")
            assert _health(f"{_pod_ip(i)}:{alive['port']}", alive["service"]) == 1
        worker_c = _kind("Deployment", "gnomon-worker")["spec"]["template"]["spec"]["containers"][0]
        service = _kind("Service", "gnomon")
        svc_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc")
        servers = ",".join(f"{_pod_ip(i)}:{svc_port}" for i in range(replicas))
        worker_env = {e["name"]: e["value"] for e in worker_c["env"]}
        assert worker_env["GNOMON_SERVERS"] == f"{service['metadata']['name']}:{svc_port}"
        worker_env["GNOMON_SERVERS"] = servers  # the client Service: any node
        wlog = open(tmp_path / "worker.log", "wb")  # noqa: SIM115
        logs.append(wlog)
        procs.append(subprocess.Popen(_command(worker_c), env={**base_env, **worker_env},
                                      stdout=wlog, stderr=subprocess.STDOUT))
        with Client(servers, timeout_s=30) as client:
            job = client.create_job(JobSpec(
                name="from-manifests", schedule=OnceSchedule(at_ms=int(time.time() * 1000) + 1500),
                tasks=[TaskSpec(name="main", queue="default",
                                payload={"argv": [sys.executable, "-c", "print('fired')"]})]))

            def succeeded():
                runs = client.list_runs(job.job_id, limit=5)
                return runs if runs and runs[0].state == RunState.SUCCEEDED else None

            runs = wait_for(succeeded, timeout_s=90, what="the scheduled run succeeded")
            assert runs[0].scheduled_for_ms == job.spec.schedule.at_ms
        import urllib.request

        with urllib.request.urlopen(f"http://{_pod_ip(0)}:{ports['metrics']}/metrics",
                                    timeout=5) as resp:
            exported = _metric_names(resp.read().decode())
        used = set(re.findall(r"\b(?:gnomon|process)_[a-z_]+", (
            (DEPLOY / "prometheus/alerts.yml").read_text()
            + (DEPLOY / "grafana/dashboards/gnomon.json").read_text())))
        missing = sorted(u for u in used if u not in exported)
        assert not missing, f"alerts/dashboard use metrics the node does not export: {missing}"
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for log in logs:
            log.close()
        if sys.exc_info()[0] is not None:
            for f in sorted(tmp_path.glob("*.log")):
                print(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}")


def test_grafana_dashboard_is_valid_json_with_panels():
    dash = json.loads((DEPLOY / "grafana/dashboards/gnomon.json").read_text())
    assert dash["uid"] == "gnomon" and len(dash["panels"]) >= 20
    assert all(p["targets"] and p["targets"][0]["expr"] for p in dash["panels"])
