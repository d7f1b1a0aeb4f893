"""deploy/ checked without a container engine: the Kustomize overlays rendered by kubectl
(`kubectl kustomize`, Debian's kubernetes-client) and every object against the API schemas
(kubernetes-validate) or, the ServiceMonitor, its schema (servicemonitor.schema.json), each
overlay consistent (members, quorum, gateways' upstreams, metrics port), alert rules and the Prometheus config (promtool), systemd units
(systemd-analyze verify), the compose file against the compose-spec schema (check-jsonschema),
the Dockerfile's shape; every node definition secure (TLS, an admin token, the HTTP port: read
with the node's own configuration loader), compose published on loopback only, every worker
dialling with a CA and a worker token; the README's commands and options real; and a real local
cluster started with exactly the command lines, environment, ports, probes and Secrets the
Kubernetes manifests give each node and the worker, with the certificates and tokens made by
the README's Kubernetes commands, which fires a job. A tool that is not installed skips its test
and says which."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "k8s"
OVERLAYS = ("dev", "production")
# The overlay deploy/README.md applies; the local cluster test runs what it renders.
README_OVERLAY = "dev"
SYSTEMD = DEPLOY / "systemd"
README = DEPLOY / "README.md"
BIN = Path(sys.executable).parent


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


@functools.cache
def _render(kustomization: str) -> tuple[dict, ...]:
    """`kubectl kustomize deploy/k8s/<kustomization>`: the objects a user applies."""
    tool = shutil.which("kubectl")
    if tool is None:
        pytest.skip("kubectl not installed (Debian package kubernetes-client; .ci/run installs it)")
    done = subprocess.run([tool, "kustomize", str(K8S / kustomization)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return tuple(d for d in yaml.safe_load_all(done.stdout) if d)


def _all_k8s(overlay: str = README_OVERLAY) -> list[dict]:
    return list(_render(f"overlays/{overlay}"))


def _kind(kind: str, name: str | None = None, overlay: str = README_OVERLAY) -> dict:
    return next(d for d in _all_k8s(overlay) if d["kind"] == kind
                and (name is None or d["metadata"]["name"] == name))


def _version() -> str:
    import tomllib

    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


@pytest.mark.parametrize("kustomization", ["base", *(f"overlays/{o}" for o in OVERLAYS)])
def test_every_rendered_object_validates_against_its_schema(kustomization):
    kv = pytest.importorskip("kubernetes_validate", reason="pip install kubernetes-validate")
    import jsonschema
    from kubernetes_validate.utils import latest_version

    docs = _render(kustomization)
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "PodDisruptionBudget", "ConfigMap", "Deployment"} <= kinds
    monitor_schema = json.loads((Path(__file__).parent / "servicemonitor.schema.json").read_text())
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            jsonschema.validate(doc, monitor_schema)
        else:
            kv.validate(doc, latest_version(), strict=True)
    # Every image is the release's, pinned: the base's tag is pyproject.toml's version.
    images = {c["image"] for d in docs if d["kind"] in ("StatefulSet", "Deployment")
              for c in d["spec"]["template"]["spec"]["containers"]}
    assert len(images) == 1 and images.pop().endswith(f"gnomon:{_version()}"), images


def test_the_servicemonitor_schema_refuses_what_the_crd_refuses():
    import jsonschema

    schema = json.loads((Path(__file__).parent / "servicemonitor.schema.json").read_text())
    good = next(d for d in _render("monitoring") if d["kind"] == "ServiceMonitor")
    jsonschema.validate(good, schema)
    bad_docs = [
        {**good, "spec": {**good["spec"], "endpoints": [{"prot": "metrics"}]}},
        {**good, "spec": {**good["spec"], "endpoints": [{"port": 7900}]}},
        {**good, "spec": {**good["spec"], "endpoints": [{"port": "metrics", "interval": "15"}]}},
        {**good, "spec": {"endpoints": good["spec"]["endpoints"]}},
    ]
    for bad in bad_docs:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def _gateway_upstreams(docs: tuple[dict, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    from gnomon.gateway.cli import config_from, parser

    gateway = next(d for d in docs if d["metadata"]["name"] == "gnomon-gateway"
                   and d["kind"] == "Deployment")
    cfg = config_from(parser().parse_args(
        gateway["spec"]["template"]["spec"]["containers"][0]["command"][1:]))
    return cfg.servers, cfg.http_servers


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_is_one_consistent_cluster(overlay):
    docs = _render(f"overlays/{overlay}")
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    replicas = sts["spec"]["replicas"]
    assert replicas == {"dev": 3, "production": 5}[overlay]
    pods = [f"gnomon-{i}.gnomon-headless" for i in range(replicas)]
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    members = [m.split("=", 1) for m in config["GNOMON_MEMBERS"].split(";")]
    assert members == [[f"gnomon-{i}", f"{p}:7800,{p}:7700,{p}:7600"]
                       for i, p in enumerate(pods)]
    pdb = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == replicas // 2 + 1, "the budget keeps a quorum"
    assert _gateway_upstreams(docs) == (tuple(f"{p}:7700" for p in pods),
                                        tuple(f"{p}:7600" for p in pods))


def test_the_overlays_differ_where_they_say():
    dev, prod = _render("overlays/dev"), _render("overlays/production")

    def node_requests(docs: tuple[dict, ...]) -> dict:
        sts = next(d for d in docs if d["kind"] == "StatefulSet")
        return sts["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]

    assert node_requests(dev) == {"cpu": "100m", "memory": "256Mi"}
    assert node_requests(prod) == {"cpu": "2", "memory": "4Gi"}
    image = next(d for d in prod if d["kind"] == "StatefulSet")["spec"]["template"]["spec"][
        "containers"][0]["image"]
    assert image == f"registry.example.com/gnomon:{_version()}"
    assert not any(d["kind"] == "ServiceMonitor" for d in dev)


def test_the_servicemonitor_scrapes_the_nodes_metrics_port():
    docs = _render("overlays/production")
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    wanted = monitor["spec"]["selector"]["matchLabels"]
    services = [d for d in docs if d["kind"] == "Service"
                and wanted.items() <= d["metadata"].get("labels", {}).items()]
    ports = {e["port"] for e in monitor["spec"]["endpoints"]}
    scraped = {s["metadata"]["name"]: p for s in services for p in s["spec"]["ports"]
               if p["name"] in ports}
    assert set(scraped) == {"gnomon", "gnomon-gateway"}, scraped
    # The node Service's port reaches the container port the node serves /metrics on: 7900,
    # gnomon's own (not node_exporter's 9100); the job label is the Service's name, which the
    # alert rules use.
    sts = next(d for d in docs if d["kind"] == "StatefulSet")
    container_ports = {p["name"]: p["containerPort"]
                       for p in sts["spec"]["template"]["spec"]["containers"][0]["ports"]}
    assert scraped["gnomon"]["port"] == 7900
    assert container_ports[scraped["gnomon"]["targetPort"]] == 7900
    config = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    assert config["GNOMON_METRICS_ADDR"].endswith(":7900")
    assert all(e.get("path", "/metrics") == "/metrics" for e in monitor["spec"]["endpoints"])
    assert 'up{job="gnomon"}' in (DEPLOY / "prometheus/alerts.yml").read_text()


def test_statefulset_has_what_an_operator_needs():
    sts = _kind("StatefulSet")
    spec = sts["spec"]
    pod = spec["template"]["spec"]
    node = pod["containers"][0]
    assert spec["podManagementPolicy"] == "Parallel" and spec["volumeClaimTemplates"]
    assert pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    # The gRPC port speaks TLS, which the kubelet's gRPC probes do not: exec probes over TLS.
    assert node["readinessProbe"]["exec"]["command"] == ["gnomon-healthcheck", ""]
    for probe in ("livenessProbe", "startupProbe"):
        assert node[probe]["exec"]["command"] == ["gnomon-healthcheck",
                                                  "gnomon.v1.ClusterService"]
        assert node[probe]["timeoutSeconds"] >= 2
    assert set(_secret_mounts(pod, node).values()) == {"gnomon-tls", "gnomon-admin-token"}
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


HEALTHCHECK = "/usr/local/bin/gnomon-healthcheck"


def test_dockerfile_is_multi_stage_and_runs_unprivileged():
    lines = [ln.strip() for ln in (DEPLOY / "Dockerfile").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    froms = [ln for ln in lines if ln.startswith("FROM ")]
    assert len(froms) >= 2 and any("COPY --from=build" in ln for ln in lines)
    users = [ln.split()[1] for ln in lines if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("0", "root")
    assert 'ENTRYPOINT ["gnomon-node"]' in lines
    # The probes of the manifests and the compose healthcheck run gnomon-healthcheck.
    assert f"COPY deploy/healthcheck.py {HEALTHCHECK}" in lines
    assert any(f"chmod 0755 {HEALTHCHECK}" in ln for ln in lines)
    # Both wheels are built from every folder the two pyproject.toml files map (gateway/ was
    # missing once), and the runtime installs the lock, hash-checked, before them.
    import tomllib

    copied = {ln.split()[1] for ln in lines if ln.startswith("COPY ") and "--from" not in ln}
    for project in (REPO, REPO / "client-dist"):
        mapped = tomllib.loads((project / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"].values()
        folders = {(project / f).resolve().relative_to(REPO).parts[0] for f in mapped}
        assert folders <= copied, f"the Dockerfile does not COPY {sorted(folders - copied)}"
    assert {"client-dist", "pyproject.toml", "deploy/requirements.lock"} <= copied
    # The image is tagged with the release's version, which the Kubernetes base pins.
    for path in (README, DEPLOY / "Dockerfile"):
        tags = re.findall(r"docker build -f deploy/Dockerfile -t (\S+) \.", path.read_text())
        assert tags == [f"gnomon:{_version()}"], (path.name, tags)
    installs = [ln for ln in lines if "pip install" in ln]
    assert "--require-hashes --no-deps -r /tmp/requirements.lock" in installs[0]
    assert any("--no-deps /wheels/*.whl" in ln for ln in installs)
    exposed = {p for ln in lines if ln.startswith("EXPOSE ") for p in ln.split()[1:]}
    assert {"7600", "7700", "7800", "7900"} <= exposed
    # Not node_exporter's 9100 (the example used it: two exporters on one port of a host).
    # (A word of its own: the lock's hashes hold the digits.)
    assert not any(re.search(r"\b9100\b", p.read_text()) for p in DEPLOY.rglob("*")
                   if p.is_file() and p.suffix != ".md")


# -- secure by default: every node and worker definition, parsed -----------------------------

NODE_FILE_SETTINGS = ("tls_cert", "tls_key", "raft_tls_cert", "raft_tls_key", "raft_tls_ca",
                      "admin_token_file")


def _compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def _secret_mounts(pod: dict, container: dict) -> dict[str, str]:
    """mountPath -> Secret name of a container's Secret volumes."""
    secrets = {v["name"]: v["secret"]["secretName"] for v in pod.get("volumes", [])
               if "secret" in v}
    return {m["mountPath"]: secrets[m["name"]] for m in container.get("volumeMounts", [])
            if m["name"] in secrets}


def _unit(path: Path, instance: str) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """A systemd unit instance: its ExecStart words, Environment= and LoadCredential= (the
    credential's path in the service -> its source), with %i and %d (the credentials
    directory) expanded as systemd does."""
    creds_dir = f"/run/credentials/{path.name.replace('@.', f'@{instance}.')}"
    text = path.read_text().replace("\\\n", " ").replace("%i", instance).replace("%d", creds_dir)
    exec_start: list[str] = []
    env: dict[str, str] = {}
    creds: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if line.startswith("#") or not sep:
            continue
        if key == "ExecStart":
            exec_start = shlex.split(value)
        elif key == "Environment":
            name, _, val = value.partition("=")
            env[name] = val
        elif key == "LoadCredential":
            cred, _, source = value.partition(":")
            creds[f"{creds_dir}/{cred}"] = source
    return exec_start, env, creds


def _env_file(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines()
                if line.strip() and not line.startswith("#"))


def _node_definitions() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Every node definition of deploy/: its gnomon-node arguments and environment."""
    out: dict[str, tuple[list[str], dict[str, str]]] = {}
    sts = _kind("StatefulSet")
    node = sts["spec"]["template"]["spec"]["containers"][0]
    assert node["command"] == ["gnomon-node"]
    for i in range(sts["spec"]["replicas"]):
        pod = f"{sts['metadata']['name']}-{i}"
        out[f"k8s {pod}"] = (list(node.get("args", [])), _container_env(node, pod))
    for name, service in _compose()["services"].items():
        if "GNOMON_NODE_ID" in service.get("environment", {}):
            # The image's ENTRYPOINT is gnomon-node: a node service overrides neither.
            assert "entrypoint" not in service and "command" not in service, name
            out[f"compose {name}"] = ([], {k: str(v) for k, v in service["environment"].items()})
    exec_start, env, _ = _unit(SYSTEMD / "gnomon-node@.service", "n1")
    assert exec_start[0] == "/usr/local/bin/gnomon-node"
    # EnvironmentFile= wins over Environment= (systemd.exec).
    out["systemd gnomon-node@n1"] = (exec_start[1:],
                                     {**env, **_env_file(SYSTEMD / "node.env.example")})
    return out


def test_every_node_definition_is_secure():
    from gnomon.node.config import load

    nodes = _node_definitions()
    assert {"k8s gnomon-0", "k8s gnomon-2", "compose n1", "compose n3",
            "systemd gnomon-node@n1"} <= set(nodes)
    for where, (argv, env) in nodes.items():
        cfg = load(argv, env)  # the node's own loader: flags, GNOMON_* variables, validation
        for name in ("tls_cert", "tls_key", "admin_token_file", "http_addr"):
            assert getattr(cfg, name), f"{where}: {name} is not set"
        # The gRPC port's certificate is the node's: other nodes dial it trusting the CA.
        assert (cfg.tls_cert, cfg.tls_key) == (cfg.raft_tls_cert, cfg.raft_tls_key), where
        assert all(m.http_addr for m in cfg.members), f"{where}: a member without HTTP address"
        assert cfg.self_member.http_addr.rsplit(":", 1)[1], where
    # systemd: the unit alone turns them on; an environment file names addresses.
    unit_env = _unit(SYSTEMD / "gnomon-node@.service", "n1")[1]
    assert {"GNOMON_TLS_CERT", "GNOMON_TLS_KEY", "GNOMON_ADMIN_TOKEN_FILE",
            "GNOMON_HTTP_ADDR"} <= set(unit_env)


def test_node_secrets_come_from_mounted_secrets_and_credentials():
    from gnomon.node.config import load

    secrets = _readme_secrets()
    sts = _kind("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    mounts = _secret_mounts(pod, pod["containers"][0])
    services = _compose()["services"]
    unit_creds = _unit(SYSTEMD / "gnomon-node@.service", "n1")[2]
    for where, (argv, env) in _node_definitions().items():
        cfg = load(argv, env)
        for name in NODE_FILE_SETTINGS:
            path = Path(getattr(cfg, name))
            if where.startswith("k8s"):
                secret = mounts.get(str(path.parent))
                assert secret, f"{where}: {name} {path} is in no mounted Secret"
                assert path.name in secrets[secret], \
                    f"{where}: the README's Secret {secret} has no {path.name}"
            elif where.startswith("compose"):
                volumes = services[where.split()[1]]["volumes"]
                assert any(v.split(":")[1] == str(path.parent) and v.endswith(":ro")
                           for v in volumes), f"{where}: {name} {path} is on no read-only volume"
        if where.startswith("systemd"):
            # Private key and token: root's files, handed over as credentials.
            for name in ("tls_key", "raft_tls_key", "admin_token_file"):
                assert getattr(cfg, name) in unit_creds, f"{where}: {name} is no credential"
            assert unit_creds[cfg.admin_token_file] == "/etc/gnomon/admin.token"


def test_compose_publishes_only_on_loopback():
    services = _compose()["services"]
    published = []
    for name, service in services.items():
        assert service.get("network_mode") != "host", name
        for port in service.get("ports", []):
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", f"{name}: {port}"
            else:
                assert str(port).startswith("127.0.0.1:"), f"{name}: {port} (every interface)"
            published.append((name, str(port).rsplit(":", 1)[-1]))
    for node in ("n1", "n2", "n3"):  # each node's gRPC port and its HTTP API / dashboard
        assert {(node, "7700"), (node, "7600")} <= set(published)


def _worker_definitions() -> dict[str, tuple[list[str], dict[str, str]]]:
    """Every worker definition of deploy/: its `gnomon` arguments and environment."""
    out = {}
    deployment = _kind("Deployment", "gnomon-worker")
    worker = deployment["spec"]["template"]["spec"]["containers"][0]
    argv = [*worker["command"], *worker.get("args", [])]
    out["k8s gnomon-worker"] = (argv, {e["name"]: e["value"] for e in worker.get("env", [])})
    service = _compose()["services"]["worker"]
    out["compose worker"] = (service["entrypoint"],
                             {k: str(v) for k, v in service.get("environment", {}).items()})
    exec_start, env, _ = _unit(SYSTEMD / "gnomon-worker@.service", "default")
    out["systemd gnomon-worker@default"] = ([Path(exec_start[0]).name, *exec_start[1:]], env)
    return out


def test_workers_dial_with_a_ca_and_a_worker_token():
    from gnomon.client.cli import build_parser

    secrets = _readme_secrets()
    workers = _worker_definitions()
    for where, (argv, env) in workers.items():
        assert argv[0] == "gnomon", where
        args = build_parser().parse_args(argv[1:])
        assert (args.group, args.action) == ("worker", "shell"), where
        ca = getattr(args, "ca", None) or env.get("GNOMON_CA")
        token = getattr(args, "token_file", None) or env.get("GNOMON_TOKEN_FILE")
        assert ca and token, f"{where}: a worker needs --ca and --token-file"
        assert Path(ca).name == "ca.crt" and Path(token).name == "worker.token", where
    # TLS checks host names: each node certificate names the hosts the workers dial.
    k8s_hosts = _cert_hosts(next(c for c in _readme_commands("Kubernetes")
                                 if c.startswith("python -m gnomon.node.certs")))
    k8s_servers = workers["k8s gnomon-worker"][1]["GNOMON_SERVERS"]
    assert len(k8s_hosts) == _kind("StatefulSet")["spec"]["replicas"]
    assert all({s.rsplit(":", 1)[0] for s in k8s_servers.split(",")} <= hosts
               for hosts in k8s_hosts.values()), (k8s_servers, k8s_hosts)
    compose_hosts = _cert_hosts(_compose()["services"]["certs"]["entrypoint"][-1])
    for server in workers["compose worker"][1]["GNOMON_SERVERS"].split(","):
        host = server.rsplit(":", 1)[0]
        assert host in compose_hosts[host], (server, compose_hosts)
    # Kubernetes: the worker's Secret holds the CA and a worker token, no node key, no admin
    # token; the README makes that token with the worker role.
    deployment = _kind("Deployment", "gnomon-worker")["spec"]["template"]["spec"]
    mounts = _secret_mounts(deployment, deployment["containers"][0])
    assert set(mounts.values()) == {"gnomon-worker"}
    assert secrets["gnomon-worker"] == {"ca.crt", "worker.token"}
    made = [c for c in _readme_commands() if " token create " in c]
    assert made and all("--role worker" in c for c in made)
    # compose: the worker mounts only its own volume, filled by worker-token with a worker
    # token made with the admin token.
    services = _compose()["services"]
    assert [v.split(":")[0] for v in services["worker"]["volumes"]] == ["worker"]
    script = services["worker-token"]["entrypoint"][-1]
    assert "--role worker" in script and "--secret-file /etc/gnomon/worker/worker.token" in script
    assert services["worker"]["depends_on"]["worker-token"]["condition"] == \
        "service_completed_successfully"
    # systemd: the worker's token is its credential; the admin token is not.
    creds = _unit(SYSTEMD / "gnomon-worker@.service", "default")[2]
    assert sorted(creds.values()) == ["/etc/gnomon/worker.token"]


def _cert_hosts(cmd: str) -> dict[str, set[str]]:
    """Node id -> the hosts its certificate names, from a `gnomon.node.certs` command."""
    words = shlex.split(cmd.replace("\\\n", " "))
    return {w.split("=", 1)[0]: set(w.split("=", 1)[1].split(",")) | {"localhost"}
            for flag, w in zip(words, words[1:], strict=False) if flag == "--node"}


def test_healthcheck_fails_when_the_node_does_not_answer():
    from gnomon.node.local.cluster import free_ports

    port = free_ports(1)[0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    env |= {"GNOMON_NODE_ID": "n1", "GNOMON_MEMBERS": f"n1=127.0.0.1:1,127.0.0.1:{port}"}
    done = subprocess.run([sys.executable, DEPLOY / "healthcheck.py"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1 and f"127.0.0.1:{port}: UNAVAILABLE" in done.stderr
    env["GNOMON_NODE_ID"] = "n9"
    done = subprocess.run([sys.executable, DEPLOY / "healthcheck.py"], env=env,
                          capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and "'n9' is not in GNOMON_MEMBERS" in done.stderr


# -- the README: its commands and options are real --------------------------------------------


def _readme_commands(section: str = "") -> list[str]:
    """The shell commands of deploy/README.md's code blocks (of one `## ` section when
    named), continuation lines joined, comment lines left out."""
    text = README.read_text()
    if section:
        start = text.index(f"\n## {section}")
        end = text.find("\n## ", start + 1)
        text = text[start:end if end > 0 else None]
    out, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if pending:
            pending += " " + stripped
        elif line.startswith("    ") and stripped and not stripped.startswith("#"):
            pending = stripped
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(pending)
        pending = ""
    return out


def _readme_secrets() -> dict[str, set[str]]:
    """Secret name -> its keys, from the README's `kubectl create secret generic` lines."""
    out = {}
    for cmd in _readme_commands("Kubernetes"):
        words = shlex.split(cmd)
        if words[:4] == ["kubectl", "create", "secret", "generic"]:
            out[words[4]] = {_from_file(w)[0] for w in words[5:]}
    return out


def _from_file(word: str) -> tuple[str, str]:
    """`--from-file=[key=]path` -> (key, path)."""
    assert word.startswith("--from-file="), word
    key, _, path = word.removeprefix("--from-file=").rpartition("=")
    return key or Path(path).name, path


def _gnomon_words(cmd: str) -> list[str] | None:
    """The `gnomon` command line in a README command (inside `kubectl exec POD --`, before a
    pipe or a redirection), or None."""
    cmd = re.sub(r"^\(umask 0?77 && ", "", cmd).split(" | ")[0].split(" > ")[0]
    cmd = re.sub(r"^kubectl exec \S+ -- ", "", cmd)
    words = shlex.split(cmd, comments=True)
    return words if words and words[0] == "gnomon" else None


def test_readme_commands_and_options_are_real(tmp_path):
    from gnomon.client.cli import build_parser
    from gnomon.node.config import Config

    text = README.read_text()
    assert "not built" not in text and "gnomon cluster add-node" in text
    fields = set(Config.__dataclass_fields__)
    node_flags = ({"--" + f.replace("_", "-") for f in fields} - {"--members"}) \
        | {"--member", "--config"}
    known_vars = ({f"GNOMON_{f.upper()}" for f in fields} | {"GNOMON_CONFIG"}
                  # the CLI and workers (client/cli), the probe (deploy/healthcheck.py)
                  | {"GNOMON_SERVERS", "GNOMON_CA", "GNOMON_CERT", "GNOMON_KEY", "GNOMON_TOKEN",
                     "GNOMON_TOKEN_FILE", "GNOMON_HEALTHCHECK_ADDR"})
    files = [README, DEPLOY / "Dockerfile", DEPLOY / "docker-compose.yml",
             DEPLOY / "healthcheck.py", *K8S.rglob("*.yaml"), *SYSTEMD.iterdir()]
    for path in files:
        unknown = set(re.findall(r"\bGNOMON_[A-Z0-9_]+", path.read_text())) - known_vars
        assert not unknown, f"{path.relative_to(REPO)} names no such variable: {unknown}"
    commands = _readme_commands()
    checked = {"gnomon": 0, "gnomon-node": 0, "certs": 0}
    for cmd in commands:
        words = _gnomon_words(cmd)
        if words:
            build_parser().parse_args(words[1:])  # raises for an unknown command or flag
            checked["gnomon"] += 1
        elif cmd.startswith("gnomon-node ") and not cmd.startswith("gnomon-node restore"):
            flags = {w.split("=")[0] for w in shlex.split(cmd) if w.startswith("--")}
            assert flags <= node_flags, f"{cmd}: no such gnomon-node flag {flags - node_flags}"
            checked["gnomon-node"] += 1
        elif cmd.startswith("python -m gnomon.node.certs") and "[" not in cmd:
            # Run it: the flags exist and the files are made.
            done = subprocess.run([sys.executable, *shlex.split(cmd)[1:]], cwd=tmp_path,
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, cmd + "\n" + done.stderr
            checked["certs"] += 1
    assert min(checked.values()) >= 1, checked


# -- a real cluster as the manifests describe it ---------------------------------------------

BASE_IP = 21  # 127.0.0.21, .22, .23: one loopback address per pod, the manifests' own ports


def _pod_ip(ordinal: int) -> str:
    return f"127.0.0.{BASE_IP + ordinal}"


def _pod_dns(text: str) -> str:
    """The pods' DNS names under the headless Service -> their loopback addresses."""
    return re.sub(r"gnomon-(\d+)\.gnomon-headless", lambda m: _pod_ip(int(m.group(1))), text)


def _mounted(text: str, mounts: dict[str, Path]) -> str:
    """Paths inside a container -> where this machine keeps its volumes."""
    for path in sorted(mounts, key=len, reverse=True):
        text = text.replace(path, str(mounts[path]))
    return text


def _localize(text: str, ordinal: int, mounts: dict[str, Path]) -> str:
    """What the cluster's DNS, volumes and Secrets give a pod, on this machine."""
    return _mounted(_pod_dns(text).replace("0.0.0.0", _pod_ip(ordinal)), mounts)


def _pod_mounts(pod: dict, container: dict, secrets: Path, data: Path) -> dict[str, Path]:
    """mountPath -> its local stand-in: a Secret's files in secrets/NAME, the data volume."""
    mounts = {path: secrets / name for path, name in _secret_mounts(pod, container).items()}
    for m in container.get("volumeMounts", []):
        if m["name"] == "data":
            mounts[m["mountPath"]] = data
    return mounts


def _create_secret(cmd: str, cwd: Path, secrets: Path) -> None:
    """`kubectl create secret generic NAME --from-file=...`: the files in secrets/NAME, as the
    kubelet mounts them (read-only for the owner)."""
    words = shlex.split(cmd)
    target = secrets / words[4]
    target.mkdir(parents=True)
    for word in words[5:]:
        key, path = _from_file(word)
        shutil.copyfile(cwd / path, target / key)
        os.chmod(target / key, 0o400)


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


def _exe(argv: list[str]) -> list[str]:
    """A container's command on this machine: the venv's entry points; gnomon-healthcheck is
    deploy/healthcheck.py (the image installs it so)."""
    if argv[0] == "gnomon-healthcheck":
        return [sys.executable, str(DEPLOY / "healthcheck.py"), *argv[1:]]
    return [str(BIN / argv[0]), *argv[1:]]


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
    from gnomon.client import Client, JobSpec, OnceSchedule, RunState, TaskSpec, TLSConfig
    from gnomon.node.local.cluster import wait_for

    sts = _kind("StatefulSet")
    replicas = sts["spec"]["replicas"]
    pod_spec = sts["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    names = [f"{sts['metadata']['name']}-{i}" for i in range(replicas)]
    worker_pod = _kind("Deployment", "gnomon-worker")["spec"]["template"]["spec"]
    worker_c = worker_pod["containers"][0]
    service = _kind("Service", "gnomon")
    svc_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "grpc")
    svc_addr = f"{service['metadata']['name']}:{svc_port}"
    servers = ",".join(f"{_pod_ip(i)}:{svc_port}" for i in range(replicas))
    secrets = tmp_path / "secrets"
    mounts = [_pod_mounts(pod_spec, container, secrets, tmp_path / f"pod-{i}" / "data")
              for i in range(replicas)]
    envs = [{k: _localize(v, i, mounts[i]) for k, v in _container_env(container, pod).items()}
            for i, pod in enumerate(names)]
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("GNOMON_")}
    shell_env = {**base_env, "PATH": f"{BIN}{os.pathsep}{base_env.get('PATH', '')}"}
    procs: list[subprocess.Popen] = []
    logs = []

    def sh(cmd: str) -> None:
        done = subprocess.run(["sh", "-c", cmd], cwd=tmp_path, env=shell_env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"{cmd}\n{done.stdout}{done.stderr}"

    def start(argv: list[str], env: dict[str, str], name: str) -> None:
        log = open(tmp_path / f"{name}.log", "wb")  # noqa: SIM115 - closed below
        logs.append(log)
        procs.append(subprocess.Popen(argv, env={**base_env, **env}, stdout=log,
                                      stderr=subprocess.STDOUT))

    def probe(i: int, kind: str) -> bool:
        """The pod's probe as the kubelet runs it: its exec command in the container."""
        spec = container[kind]
        try:
            return subprocess.run(_exe(spec["exec"]["command"]), env={**base_env, **envs[i]},
                                  capture_output=True, timeout=spec["timeoutSeconds"]
                                  ).returncode == 0
        except subprocess.TimeoutExpired:
            return False

    def apply() -> None:
        """`kubectl apply`: the nodes start and become ready by their own probes."""
        for i, pod in enumerate(names):
            env, ip = envs[i], _pod_ip(i)
            assert f"{pod}={ip}:{ports['raft']},{ip}:{ports['grpc']},{ip}:{ports['http']}" \
                in env["GNOMON_MEMBERS"]
            assert env["GNOMON_METRICS_ADDR"] == f"{ip}:{ports['metrics']}"
            assert env["GNOMON_HTTP_ADDR"] == f"{ip}:{ports['http']}"
            start(_exe([*container["command"], *container.get("args", [])]), env, pod)
        for i in range(replicas):
            wait_for(lambda i=i: probe(i, "readinessProbe"), timeout_s=60, interval_s=0.5,
                     what=f"readiness of {names[i]}")
            assert probe(i, "livenessProbe") and probe(i, "startupProbe")

    try:
        # deploy/README.md's Kubernetes steps, in their order, with local stand-ins for
        # kubectl: certificates, the admin token, the Secrets, the pods, the worker token.
        steps = _readme_commands("Kubernetes")
        apply_step = f"kubectl apply -k deploy/k8s/overlays/{README_OVERLAY}"
        assert apply_step in steps
        for cmd in steps:
            if cmd.startswith("kubectl create secret generic "):
                _create_secret(cmd, tmp_path, secrets)
            elif cmd == apply_step:
                apply()
            elif cmd.startswith("(umask 077 && kubectl exec gnomon-0 -- "):
                inside = cmd.replace("kubectl exec gnomon-0 -- ", "", 1)
                sh(_localize(inside, 0, mounts[0]).replace(f"-s {svc_addr} ", f"-s {servers} "))
            elif cmd.startswith("kubectl "):
                pytest.fail(f"no local stand-in for the README's {cmd!r}")
            else:
                sh(_pod_dns(cmd))
        for secret in ("admin.token", "worker.token"):
            assert (tmp_path / "tls" / secret).stat().st_mode & 0o777 == 0o600, secret

        worker_mounts = _pod_mounts(worker_pod, worker_c, secrets, tmp_path / "worker")
        worker_env = {e["name"]: e["value"] for e in worker_c["env"]}
        assert worker_env["GNOMON_SERVERS"] == svc_addr
        worker_env["GNOMON_SERVERS"] = servers  # the client Service: any node
        start([_mounted(a, worker_mounts)
               for a in _exe([*worker_c["command"], *worker_c.get("args", [])])],
              worker_env, "worker")
        ca = tmp_path / "tls" / "ca.crt"
        admin = (tmp_path / "tls" / "admin.token").read_text().strip()
        with Client(servers, timeout_s=30, tls=TLSConfig(ca_file=str(ca)), token=admin) as client:
            job = client.create_job(JobSpec(
                name="from-manifests", schedule=OnceSchedule(at_ms=int(time.time() * 1000) + 1500),
                tasks=[TaskSpec(name="main", queue="default",
                                payload={"argv": [sys.executable, "-c", "print('fired')"]})]))

            def succeeded():
                runs = client.list_runs(job.job_id, limit=5)
                return runs if runs and runs[0].state == RunState.SUCCEEDED else None

            runs = wait_for(succeeded, timeout_s=90, what="the scheduled run succeeded")
            assert runs[0].scheduled_for_ms == job.spec.schedule.at_ms
        # The HTTP API: TLS of the gRPC port, and a token needed.
        tls = ssl.create_default_context(cafile=str(ca))
        url = f"https://{_pod_ip(0)}:{ports['http']}/v1/cluster"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, context=tls, timeout=5)
        assert refused.value.code == 401
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {admin}"})
        with urllib.request.urlopen(request, context=tls, timeout=5) as resp:
            assert resp.status == 200 and json.load(resp)

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


def test_the_gateways_are_secure_and_front_every_node():
    from gnomon.gateway.cli import config_from, parser

    deployment = _kind("Deployment", "gnomon-gateway")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"][0] == "gnomon-gateway"
    cfg = config_from(parser().parse_args(container["command"][1:]))  # its own validation
    assert cfg.tls_cert and cfg.tls_key and cfg.upstream_ca, "TLS on both sides"
    replicas = _kind("StatefulSet")["spec"]["replicas"]
    pods = [f"gnomon-{i}.gnomon-headless" for i in range(replicas)]
    assert cfg.servers == tuple(f"{p}:7700" for p in pods)
    assert cfg.http_servers == tuple(f"{p}:7600" for p in pods)
    # Its files come from the README's Secret, and its certificate names its Service.
    mounts = _secret_mounts(pod, container)
    for path in (cfg.tls_cert, cfg.tls_key, cfg.upstream_ca):
        secret = mounts[str(Path(path).parent)]
        assert Path(path).name in _readme_secrets()[secret], path
    certs = [c for c in _readme_commands("Kubernetes")
             if c.startswith("python -m gnomon.node.certs") and "--gateway" in c]
    assert certs and "gateway=gnomon-gateway" in certs[0]
    service = _kind("Service", "gnomon-gateway")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert {p["port"] for p in service["spec"]["ports"]} == {7600, 7700, 7900}
